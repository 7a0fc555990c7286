"""Fuzzing every reader and tokenizer: on any input each returns normally (with a sane result) or raises
ptm_jax.errors.PtmError -- never another exception, never a hang (10 s deadline per input).

The targets and input strategies live in benchmarks/fuzz_readers.py (which runs >= 10,000 inputs); here each
target gets 150 derandomized Hypothesis inputs, so the suite is deterministic and fast. A target listed in
KNOWN_CRASHES is marked xfail(strict=True): the reason names the crash, and ``strict`` turns the mark into a
failure once the crash is fixed, so the mark cannot outlive the bug. The tests after the fuzz targets pin the
crashes the fuzzer found: each bad input is refused with its file, line and what to do.
"""
from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from ptm_jax.data.corpus import read_documents
from ptm_jax.errors import DataError

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = 150


def _load_harness():
    spec = importlib.util.spec_from_file_location("fuzz_readers", REPO / "benchmarks" / "fuzz_readers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fuzz_readers", module)
    spec.loader.exec_module(module)
    return module


fuzz = _load_harness()

KNOWN_CRASHES: dict[str, str] = {}  # target name -> where it crashes; none open since their fixes


def _param(name: str):
    if name in KNOWN_CRASHES:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CRASHES[name]))
    return name


@pytest.fixture(scope="module")
def tools(shared_data, tmp_path_factory):
    return fuzz.make_tools(tmp_path_factory.mktemp("fuzz_tools"), shared_data / "corpus/tinyshakespeare/input.txt")


@pytest.mark.parametrize("name", [_param(n) for n in fuzz.TARGETS])
def test_reader_returns_or_raises_ptm_error_on_fuzzed_input(name, tools, tmp_path):
    outcomes: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(fuzz.STRATEGIES[name])
    def prop(value):
        out = fuzz.check(name, value, tools, tmp_path, seconds=10.0)
        outcomes[out.kind] += 1
        assert out.kind in ("ok", "rejected"), f"{name}: {out.kind} on {value!r:.300}\n{out.detail}"

    prop()
    assert outcomes["crash"] == outcomes["wrong"] == outcomes["hang"] == 0
    assert sum(outcomes.values()) >= EXAMPLES // 2, outcomes  # Hypothesis may stop early on a small space
    # the inputs reach both sides of the contract: some are accepted, and (except for the tokenizers,
    # which accept any text) some are refused
    assert outcomes["ok"] > 0, outcomes
    if not name.endswith(".encode"):
        assert outcomes["rejected"] > 0, outcomes


def test_a_huge_line_is_refused_with_its_file_and_line_number(tmp_path):
    path = tmp_path / "huge.txt"
    path.write_bytes(b"first line.\n" + b"x" * 2_000_000 + b"\nlast line.\n")
    with pytest.raises(DataError, match=rf"{path.name}:2: line is longer than data.max_line_bytes=1000000"):
        list(read_documents(path))


def test_nul_bytes_and_invalid_utf8_are_refused_with_their_line(tmp_path):
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"a.\nb.\nc\x00d.\n")
    with pytest.raises(DataError, match=rf"{nul.name}:3: binary file"):
        list(read_documents(nul))
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"one.\ntwo.\ncaf\xe9.\n")
    with pytest.raises(DataError, match=rf"{latin.name}:3: not valid UTF-8"):
        list(read_documents(latin))


def test_the_deadline_turns_a_hang_into_a_reported_outcome():
    import time

    out = fuzz.attempt(lambda: time.sleep(5), seconds=0.2)
    assert out.kind == "hang"
    assert fuzz.attempt(lambda: int("x"), seconds=1).kind == "crash"
    assert fuzz.attempt(lambda: (_ for _ in ()).throw(DataError("f:1: bad")), seconds=1).kind == "rejected"


# ----------------------------------------------------------------------------------------------------
# The crashes the fuzzer found, pinned: each input is refused with its file, line and a fix


def test_invalid_utf8_in_glue_squad_and_conll_is_refused_with_its_line(tmp_path):
    from ptm_jax.data.tasks.conll import read_conll
    from ptm_jax.data.tasks.glue import read_glue
    from ptm_jax.data.tasks.squad import read_squad

    rte = tmp_path / "glue" / "RTE"
    rte.mkdir(parents=True)
    (rte / "train.tsv").write_bytes(b"index\tsentence1\tsentence2\tlabel\r\n0\ta\tb\tentailment\r\n"
                                    b"1\tcaf\xe9\tb\tentailment\r\n")
    (rte / "dev.tsv").write_bytes(b"index\tsentence1\tsentence2\tlabel\r0\ta\tb\tentailment\r1\ta\tb\t"
                                  b"entailment\r2\tna\xefve\tb\tentailment\r")  # old Mac line ends
    with pytest.raises(DataError, match=r"RTE/train\.tsv:3: not valid UTF-8 \(byte 0xe9 at file offset 56\);"
                                        r".*re-encode"):
        read_glue(tmp_path / "glue", "rte", "train")
    with pytest.raises(DataError, match=r"RTE/dev\.tsv:4: not valid UTF-8 \(byte 0xef"):
        read_glue(tmp_path / "glue", "rte", "dev")
    squad = tmp_path / "dev.json"
    squad.write_bytes(b'\xef\xbb\xbf{"version": "1.1",\n "data": [\n {"title": "caf\xe9", "paragraphs": []}]}\n')
    with pytest.raises(DataError, match=r"dev\.json:3: not valid UTF-8 \(byte 0xe9 at file offset 48\)"):
        read_squad(squad)
    conll = tmp_path / "eng.train"
    conll.write_bytes(b"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\ncaf\xe9 NN I-NP O\n")
    with pytest.raises(DataError, match=r"eng\.train:4: not valid UTF-8 \(byte 0xe9"):
        read_conll(conll)


def test_glue_field_over_the_csv_limit_and_a_nan_score_are_refused_with_their_line(tmp_path):
    from ptm_jax.data.tasks.glue import read_glue

    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "train.tsv").write_text("sentence\tlabel\nfine\t1\n" + "x" * 200_000 + "\t0\n")
    with pytest.raises(DataError, match=r"SST-2/train\.tsv:3: unreadable TSV row \(field larger than field "
                                        r"limit \(131072\).*fix or replace"):
        read_glue(tmp_path, "sst2", "train")
    (tmp_path / "STS-B").mkdir()
    row = "\t".join(["0", "g", "f", "2012", "1", "2", "3", "a b", "c d"])
    (tmp_path / "STS-B" / "dev.tsv").write_text(f"header\n{row}\t3.5\n{row}\tnan\n")
    with pytest.raises(DataError, match=r"STS-B/dev\.tsv:3: score 'nan' is not a finite number"):
        read_glue(tmp_path, "stsb", "dev")


SMALL_HF = {"vocab_size": 12, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2,
            "intermediate_size": 8, "max_position_embeddings": 8, "type_vocab_size": 2}


@pytest.mark.parametrize("key,value,message", [
    ("num_hidden_layers", 25_000_000_000_000_000, r"num_hidden_layers=25000000000000000 \(int\) is not in \[1, 1024\]"),
    ("num_hidden_layers", 2.5e16, r"num_hidden_layers=2\.5e\+16 \(float\) is not an integer"),
    ("hidden_size", "768", r"hidden_size='768' \(str\) is not an integer"),
    ("vocab_size", True, r"vocab_size=True \(bool\) is not an integer"),
    ("num_attention_heads", 0, r"num_attention_heads=0 \(int\) is not in \[1, 4096\]"),
    ("num_attention_heads", 3, r"hidden_size=4 is not divisible by num_attention_heads=3"),
    ("max_position_embeddings", -1, r"max_position_embeddings=-1 \(int\) is not in \[1, 1048576\]"),
    ("hidden_dropout_prob", 1.5, r"hidden_dropout_prob=1\.5 \(float\) is not a number in \[0, 1\)"),
    ("layer_norm_eps", float("nan"), r"layer_norm_eps=nan \(float\) is not a number in \(0, 1\]"),
    ("hidden_act", ["gelu"], r"hidden_act=\['gelu'\] is not supported"),
    ("is_decoder", "false", r"is_decoder='false' \(str\) is not true or false"),
    ("pad_token_id", 12, r"pad_token_id=12 \(int\) is not null or a token id in \[0, vocab_size=12\)"),
    ("id2label", ["a", "b"], r"id2label=\['a', 'b'\] \(list\) is not an object"),
])
def test_hf_config_values_of_the_wrong_type_or_size_are_refused_naming_the_key(key, value, message):
    from ptm_jax.errors import CheckpointError
    from ptm_jax.families.bert.hf import model_config_from_hf

    with pytest.raises(CheckpointError, match=rf"^m/config\.json: {message}"):
        model_config_from_hf({**SMALL_HF, key: value}, Path("m/config.json"))
    with pytest.raises(CheckpointError, match=r"m/config\.json: holds a JSON list"):
        model_config_from_hf([SMALL_HF], Path("m/config.json"))


def test_hf_folder_with_absurd_layers_or_malformed_json_is_refused_at_once(tmp_path):
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from ptm_jax.errors import CheckpointError
    from ptm_jax.families.bert.hf import import_hf

    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({**SMALL_HF, "num_hidden_layers": 25_000_000_000_000_000}))
    with pytest.raises(CheckpointError,
                       match=r"config\.json: num_hidden_layers=25000000000000000 .*fix that key") as refused:
        import_hf(tmp_path)  # the layer loop ran ~forever before the bound
    # refused by the config check, before the weights are mapped layer by layer (unbounded, that loop ran for hours)
    frames = [entry.name for entry in refused.traceback]
    assert "model_config_from_hf" in frames and "hf_to_params" not in frames, frames
    (tmp_path / "config.json").write_bytes(b'{"vocab_size": 12,\n "model_type": "b\xe9rt"}')
    with pytest.raises(CheckpointError, match=r"config\.json:2: not UTF-8 \(byte 0xe9 at offset 36\)"):
        import_hf(tmp_path)
    (tmp_path / "config.json").write_text("[" * 100_000)
    with pytest.raises(CheckpointError, match=r"config\.json: not usable JSON \(RecursionError"):
        import_hf(tmp_path)
    (tmp_path / "config.json").unlink()
    (tmp_path / "modules.json").write_text('[{"type": "x.Transformer", "path": 7}]')
    with pytest.raises(CheckpointError, match=r"modules\.json: module 0 is not an object whose 'type' is a string"):
        import_hf(tmp_path)
    (tmp_path / "modules.json").write_text('{"type": "x.Transformer"}')
    with pytest.raises(CheckpointError, match=r"modules\.json: holds a JSON dict, expected a list"):
        import_hf(tmp_path)


def test_preset_extends_must_be_a_preset_name_or_path(tmp_path):
    from ptm_jax.config_loading import load_config
    from ptm_jax.errors import ConfigError

    preset = tmp_path / "p.toml"
    for value, kind in (("5", "int"), ("['bert_tiny']", "list"), ("{a = 1}", "dict"), ("true", "bool")):
        preset.write_text(f"# my preset\nextends = {value}\n[train]\nsteps = 3\n")
        with pytest.raises(ConfigError, match=rf"p\.toml:2: extends = .* \({kind}\); 'extends' takes the name of "
                                              r"a preset \(.*bert_tiny.*\) or the path of a \.toml file"):
            load_config(str(preset))
    preset.write_text("extends = 'bert_tinny'\n")
    with pytest.raises(ConfigError, match=r"p\.toml:1: extends: unknown preset 'bert_tinny'.*bert_tiny"):
        load_config(str(preset))
    other = tmp_path / "q.toml"
    other.write_text(f"extends = '{tmp_path}/../{tmp_path.name}/p.toml'\n")  # the same file, spelt otherwise
    preset.write_text(f"extends = '{other}'\n")
    with pytest.raises(ConfigError, match=r"'extends' forms a cycle"):
        load_config(str(preset))
    preset.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError, match=r"p\.toml: not usable TOML \(RecursionError"):
        load_config(str(preset))
    preset.write_text("extends = 'bert_tiny'\n[train]\nsteps = 3\n")
    assert load_config(str(preset)).train.steps == 3
