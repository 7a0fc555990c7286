"""LoRA finetuning (``finetune.adapter=lora``, ``ptm_jax/adapters/lora``) of every Transformer family's tiny
preset: a 1-step pretraining run is the base, a short LoRA finetuning on the embedded task trains from it, and
the tests read what the stage wrote (the last checkpoint's state, ``best/``, ``best_adapter/``)."""
from __future__ import annotations

import contextlib
import io
import json

import jax
import numpy as np
import pytest
from transformers5_env import TRANSFORMERS5_MISSING, run_transformers5_check, transformers5

from ptm_jax.adapters import registry as adapters
from ptm_jax.adapters.lora import adapt
from ptm_jax.adapters.lora.files import merge_adapter_dir
from ptm_jax.cli import main
from ptm_jax.config_loading import load_config, section, to_dict
from ptm_jax.errors import ConfigError
from ptm_jax.export import params as params_lib
from ptm_jax.families import registry
from ptm_jax.train.finetune import build_task, finetune

PRESETS = {"bert": "bert_tiny", "ernie": "ernie_tiny", "gpt": "gpt_tiny", "xlnet": "xlnet_tiny"}
RANK, ALPHA, STEPS = 4, 8.0, 6


def _ptm(*args: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(list(args))


def _overrides(base, out, *more):
    return [f"output_dir={str(out)!r}", "finetune.task='embedded'", f"finetune.init={str(base)!r}",
            "finetune.adapter='lora'", f"lora.rank={RANK}", f"lora.alpha={ALPHA}", "finetune.learning_rate=1e-2",
            f"finetune.epochs={STEPS * 16 / 3744}", "finetune.eval_every=3", "finetune.batch_size=16",
            "train.progress_bar=false", "train.checkpoint_every=3", "finetune.max_seq_length=64", *more]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """family -> (config, base run, LoRA finetuning stage dir), each made on first use."""
    root = tmp_path_factory.mktemp("lora")
    done: dict[str, tuple] = {}

    def get(family: str):
        if family not in done:
            base = root / f"{family}_base"
            assert _ptm("pretrain", "-c", PRESETS[family], f"output_dir={str(base)!r}", "train.steps=1",
                        "train.checkpoint_every=1", "train.eval_every=0") == 0
            cfg = load_config(PRESETS[family], _overrides(base, root / family))
            summary = finetune(cfg)
            assert summary["step"] == STEPS and summary["best"]["step"] > 0
            done[family] = (cfg, base, root / family / "finetune-embedded")
        return done[family]

    return get


def _state(stage) -> dict:
    """The last checkpoint's train state as numpy (orbax's own reader)."""
    step = max(int(p.name) for p in (stage / "checkpoints").iterdir() if p.name.isdigit())
    return params_lib._restore_numpy(stage / "checkpoints" / str(step) / "state")


def _objective(cfg, base):
    """The run's task objective and its LoRA wrapper, built as the finetuning stage builds them."""
    _, model_cfg, info, tok_dir = params_lib.load_params(base)
    tok = params_lib.load_tokenizer(info, tok_dir)
    fam = registry.get(model_cfg.family)
    if fam.finetuning.prepare_finetune is not None:
        model_cfg = fam.finetuning.prepare_finetune(model_cfg, tok)
    obj, _ = build_task(cfg, model_cfg, tok)
    wrapped, groups = adapters.get("lora").wrap(section(cfg, "lora"), obj, [], model_cfg=model_cfg,
                                                trunk=fam.layout.trunk)
    return obj, wrapped, model_cfg, fam


def _expected_adapter_count(model_cfg) -> int:
    """Query and value of every layer: r (d_in + d_out) each, d_in = d_out = hidden size."""
    return model_cfg.num_layers * 2 * RANK * (2 * model_cfg.hidden_size)


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_lora_keeps_every_pretrained_weight_bit_for_bit_and_trains_the_adapters(runs, family):
    cfg, base, stage = runs(family)
    state = _state(stage)["params"]
    trunk = registry.get(cfg.model.family).layout.trunk
    pretrained = params_lib.flatten(params_lib.load_params(base)[0][trunk])
    after = params_lib.flatten(state["params"][trunk])
    grown = {k for k in after if after[k].shape != pretrained.get(k, after[k]).shape}  # GPT's task-token rows
    assert sorted(after) == sorted(pretrained)
    for k in pretrained:
        got = after[k][: pretrained[k].shape[0]] if k in grown else after[k]
        np.testing.assert_array_equal(got, pretrained[k], err_msg=k)
    lora = params_lib.flatten(state["lora"])
    assert len(lora) == 2 * 2 * cfg.model.num_layers  # A and B of query and value per layer
    assert all(k.split("/")[-3] in ("query", "value", "q", "v") for k in lora if k.endswith("kernel/lora_a"))
    assert min(np.abs(v).max() for k, v in lora.items() if k.endswith("lora_b")) > 0  # B left zero: it trained


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_only_adapters_and_head_have_optimizer_state_and_the_count_follows_the_formula(runs, family):
    cfg, base, stage = runs(family)
    state = _state(stage)
    _, wrapped, model_cfg, fam = _objective(cfg, base)
    trained = params_lib.flatten(params_lib.load_params(stage / "best_adapter")[0])
    head = {k: v for k, v in trained.items() if not k.startswith(fam.layout.trunk + "/")}
    adapters_only = {k: v for k, v in trained.items() if "/lora_" in k}
    # the trunk's tensors beside the adapters: only those the base lacks (GPT's embedding grown by task tokens)
    grown = sorted(k for k in trained if k.startswith(fam.layout.trunk + "/") and k not in adapters_only)
    pretrained = params_lib.flatten({fam.layout.trunk: params_lib.load_params(base)[0][fam.layout.trunk]})
    now = params_lib.flatten({fam.layout.trunk: state["params"]["params"][fam.layout.trunk]})
    assert grown == sorted(k for k in now if now[k].shape != pretrained[k].shape)
    assert sum(v.size for v in adapters_only.values()) == _expected_adapter_count(model_cfg)
    head_count = sum(v.size for v in params_lib.flatten(state["params"]["params"]).values()) - sum(
        v.size for v in params_lib.flatten(state["params"]["params"][fam.layout.trunk]).values())
    assert sum(v.size for v in head.values()) == head_count > 0
    # Adam's two moments for each trained parameter, none for the frozen trunk (scalar counters aside)
    moments = sum(np.size(x) for x in jax.tree.leaves(state["opt_state"]) if np.ndim(x) > 0)
    assert moments == 2 * (_expected_adapter_count(model_cfg) + head_count)
    info = json.loads((stage / "best_adapter" / "ptm.json").read_text())["adapter"]
    assert info["adapter_parameters"] == _expected_adapter_count(model_cfg) and info["rank"] == RANK


@pytest.mark.parametrize("family", sorted(PRESETS))
def test_merged_params_give_the_adapted_logits(runs, family):
    cfg, base, stage = runs(family)
    obj, wrapped, model_cfg, fam = _objective(cfg, base)
    best_step = json.loads((stage / "best.json").read_text())["step"]
    state = params_lib._restore_numpy(stage / "checkpoints" / str(best_step) / "state")["params"]
    batch = next(iter(obj.eval_batches(16, 0, 1)))
    adapted = np.asarray(wrapped.predict(state, batch)["logits"])
    merged, _, _, _ = params_lib.load_params(stage / "best")
    plain = np.asarray(obj.predict({"params": merged}, batch)["logits"])
    np.testing.assert_allclose(plain, adapted, atol=1e-5, rtol=0)
    unadapted = np.asarray(obj.predict({"params": state["params"]}, batch)["logits"])
    assert np.abs(unadapted - adapted).max() > 1e-4  # the adapters change the model
    # the adapters alone, merged into the base again, give best/ back
    again, _, _ = merge_adapter_dir(base, stage / "best_adapter")
    a, b = params_lib.flatten(again), params_lib.flatten(merged)
    assert sorted(a) == sorted(b)
    for k in b:
        np.testing.assert_allclose(a[k], b[k], atol=1e-6, rtol=0, err_msg=k)


def test_a_target_pattern_matching_nothing_is_a_config_error_naming_the_field(runs, tmp_path):
    cfg0, base, _ = runs("bert")
    cfg = load_config("bert_tiny", _overrides(base, tmp_path, "lora.targets=['attention/qeury/kernel$']"))
    with pytest.raises(ConfigError, match=r"lora\.targets\[0\]='attention/qeury/kernel\$' matches no kernel"):
        finetune(cfg)
    cfg = load_config("bert_tiny", _overrides(base, tmp_path, "lora.targets=['query/kernel$', 'query/bias$']"))
    with pytest.raises(ConfigError, match=r"lora\.targets\[1\]='query/bias\$' matches .*query/bias of shape"):
        finetune(cfg)
    cfg = load_config("bert_tiny", _overrides(base, tmp_path, "lora.targets=['dense/kernel$']"))
    with pytest.raises(ConfigError, match=r"params/classifier/dense/kernel, which is not a frozen pretrained"):
        finetune(cfg)


def test_lora_section_is_owned_by_the_adapter_and_written_back_at_top_level():
    cfg = load_config("bert_tiny", ["finetune.adapter=lora", "lora.rank=2", "lora.targets=['query/kernel$']"])
    assert section(cfg, "lora").rank == 2 and section(cfg, "lora").scale == 4.0
    assert to_dict(cfg)["lora"]["targets"] == ["query/kernel$"] and "plugins" not in to_dict(cfg)
    assert section(load_config("bert_tiny"), "lora").rank == 8  # defaults when the run sets none
    with pytest.raises(ConfigError, match=r"unknown config key 'lora.rnak'.*lora.rank"):
        load_config("bert_tiny", ["lora.rnak=2"])
    with pytest.raises(ConfigError, match=r"finetune.adapter='lroa' is not a registered adapter .*'lora'"):
        load_config("bert_tiny", ["finetune.adapter=lroa"])
    with pytest.raises(ConfigError, match=r"lora.dropout=1.5: must be in \[0, 1\)"):
        load_config("bert_tiny", ["lora.dropout=1.5"])


def test_adapters_beside_dense_layers_equal_the_merged_kernels_and_xlnet_refuses_dropout(runs):
    """The dropout path's arithmetic (the update beside each Dense call) at rate 0 is the merged path's."""
    cfg, base, stage = runs("bert")
    _, wrapped, _, _ = _objective(cfg, base)
    state = _state(stage)["params"]
    batch = next(iter(wrapped.eval_batches(16, 0, 1)))
    norms = wrapped.normalizers(batch)
    merged, _ = wrapped.inner.loss(wrapped.model_params(state), batch, None, norms, False)
    model = {"params": adapt.freeze(state["params"], wrapped.frozen)}
    with adapt.beside_dense(state["lora"], wrapped.targets, wrapped.cfg.scale, 0.0, jax.random.key(0)):
        beside, _ = wrapped.inner.loss(model, batch, None, norms, False)
    np.testing.assert_allclose(float(beside), float(merged), rtol=1e-6)
    xcfg, xbase, _ = runs("xlnet")
    cfg = load_config("xlnet_tiny", _overrides(xbase, stage.parent.parent / "xlnet_dropout", "lora.dropout=0.1"))
    with pytest.raises(ConfigError, match=r"lora.dropout>0 .*attention/q/kernel.*set lora.dropout=0"):
        finetune(cfg)


def _merged_export(runs, family):
    """``ptm export <stage>/best --format hf`` of the merged model: (folder, an eval batch, the LoRA model's
    logits on it)."""
    cfg, base, stage = runs(family)
    obj, wrapped, _, _ = _objective(cfg, base)
    hf = stage.parent / "best_hf"
    if not hf.exists():
        assert _ptm("export", str(stage / "best"), "--format", "hf", "--out", str(hf)) == 0
    best_step = json.loads((stage / "best.json").read_text())["step"]
    state = params_lib._restore_numpy(stage / "checkpoints" / str(best_step) / "state")["params"]
    batch = next(iter(obj.eval_batches(16, 0, 1)))
    return hf, batch, np.asarray(wrapped.predict(state, batch)["logits"])


@pytest.mark.parametrize("family", ["bert", "ernie"])
def test_merged_export_loads_in_transformers_with_the_adapted_logits(runs, family):
    """The merged export in transformers 4.57's sequence classifier gives the LoRA model's logits."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf, batch, adapted = _merged_export(runs, family)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor(np.asarray(batch["input_ids"]), dtype=torch.long),
                       attention_mask=torch.tensor(np.asarray(batch["input_mask"]), dtype=torch.long),
                       token_type_ids=torch.tensor(np.asarray(batch["segment_ids"]), dtype=torch.long)).logits.numpy()
    np.testing.assert_allclose(logits, adapted, atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ["bert", "ernie"])
def test_merged_export_loads_in_transformers_5_with_the_adapted_logits(runs, family):
    """The same in transformers 5 (PyTorch only; tests/transformers5_env.py), which users have now."""
    found = transformers5()
    if found is None:
        pytest.skip(TRANSFORMERS5_MISSING)
    hf, batch, adapted = _merged_export(runs, family)
    inputs = hf.parent / "best_hf_inputs.npz"
    np.savez(inputs, input_ids=np.asarray(batch["input_ids"]), attention_mask=np.asarray(batch["input_mask"]),
             token_type_ids=np.asarray(batch["segment_ids"]))
    architecture = {"bert": "BertForSequenceClassification", "ernie": "ErnieForSequenceClassification"}[family]
    spec = hf.parent / "transformers5.json"
    spec.write_text(json.dumps([{"hf": str(hf), "architecture": architecture, "inputs": str(inputs),
                                 "out": str(hf.parent / "best_hf_v5"), "texts": ["a short sentence"]}]))
    (report,) = run_transformers5_check(*found, spec)
    assert int(report["version"].split(".")[0]) >= 5 and report["class"] == architecture
    assert report["missing"] == [] and report["unexpected"] == [], report
    with np.load(hf.parent / "best_hf_v5.logits.npz") as theirs:
        np.testing.assert_allclose(theirs["logits"], adapted, atol=1e-5, rtol=0)
