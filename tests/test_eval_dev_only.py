"""`ptm eval` needs only the split it scores, for every task family.

For each task a tiny BERT with the task's head is initialised from the objective that finetuning builds (which
reads the training split: CoNLL's label list comes from it) and saved as `ptm finetune` saves its best model
(``save_params`` with ``task`` / ``label_names`` / ``num_labels``). The loop's evaluation of that objective
on the full folder gives the reference metrics and prediction files. Then ``evaluate_task`` (what `ptm eval`
runs) scores the saved model from a temporary folder that holds only the evaluated split, at another evaluation
batch (``finetune.eval_batch_size``): the metrics and the prediction files must be identical.
"""
from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np
import pytest

from ptm_jax.config import FinetuneConfig, RunConfig
from ptm_jax.data.tasks.sections import SquadConfig
from ptm_jax.families.bert.config import BertConfig
from ptm_jax.errors import ConfigError
from ptm_jax.export.params import save_params
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.evaluation import evaluate_task
from ptm_jax.train.finetune import build_task, finetune_train_config
from ptm_jax.train.loop import compile_objective, evaluate


def tiny_bert(minilm_tok) -> BertConfig:
    return BertConfig(vocab_size=minilm_tok.vocab_size, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                       max_position_embeddings=128)


def squad_slice(src, dst, articles: slice, max_questions: int, version_2: bool = False) -> None:
    """A SQuAD JSON of some articles of ``src`` (at most ``max_questions`` questions each); ``version_2``
    makes every third question unanswerable, as in SQuAD 2.0's layout."""
    data = json.loads(src.read_text())["data"][articles]
    k = 0
    for art in data:
        left = max_questions
        for para in art["paragraphs"]:
            para["qas"] = para["qas"][:max(left, 0)]
            left -= len(para["qas"])
            if version_2:
                for qa in para["qas"]:
                    qa["is_impossible"] = k % 3 == 0
                    if qa["is_impossible"]:
                        qa["plausible_answers"], qa["answers"] = qa["answers"], []
                    k += 1
        art["paragraphs"] = [p for p in art["paragraphs"] if p["qas"]]
    dst.write_text(json.dumps({"version": "v2.0" if version_2 else "1.1", "data": data}))


SWAG_HEADER = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label"
SWAG_WORDS = "the man sits down. she opens a door and walks out slowly into the rain while laughing".split()


def swag_csv(path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        w = lambda k: " ".join(rng.choice(SWAG_WORDS, k))  # noqa: E731
        rows.append(f'{i},v{i},{i},x,{w(6)},{w(2)},gold,{w(3)},{w(4)},{w(3)},{w(5)},{int(rng.integers(4))}')
    path.write_text("\n".join([SWAG_HEADER, *rows]) + "\n")


def head(src, dst, lines: int) -> None:
    with open(src, encoding="utf-8") as f:
        dst.write_text("".join(line for _, line in zip(range(lines), f)), encoding="utf-8")


def task_folders(task: str, shared, tmp):
    """(full folder, folder with only the evaluated split, finetune overrides) per task."""
    full, dev_only = tmp / "full", tmp / "dev_only"
    full.mkdir()
    dev_only.mkdir()
    if task == "rte":  # GLUE: the real dev.tsv; full folder: + the first 200 training pairs
        for d in (full, dev_only):
            (d / "RTE").mkdir()
            shutil.copy(shared / "glue" / "RTE" / "dev.tsv", d / "RTE" / "dev.tsv")
        head(shared / "glue" / "RTE" / "train.tsv", full / "RTE" / "train.tsv", 201)
        return full, dev_only, {}
    if task in ("squad", "squad_v2"):  # train: articles 1-2 of the real dev file; dev: 30 questions of article 0
        v2 = task == "squad_v2"
        ver = "v2.0" if v2 else "v1.1"
        src = shared / "squad" / "dev-v1.1.json"
        squad_slice(src, full / f"train-{ver}.json", slice(1, 3), 40, v2)
        squad_slice(src, full / f"dev-{ver}.json", slice(0, 1), 30, v2)
        shutil.copy(full / f"dev-{ver}.json", dev_only / f"dev-{ver}.json")
        return full, dev_only, {"max_seq_length": 128, "squad": SquadConfig(doc_stride=64, max_query_length=32)}
    if task == "conll2003":  # the first 3000 / 4000 lines of eng.train / eng.testa (all 9 tags occur)
        head(shared / "conll2003" / "eng.train", full / "eng.train", 3000)
        head(shared / "conll2003" / "eng.testa", full / "eng.testa", 4000)
        shutil.copy(full / "eng.testa", dev_only / "eng.testa")
        return full, dev_only, {}
    if task == "swag":  # no SWAG in shared/data: tiny SWAG-layout CSVs
        swag_csv(full / "train.csv", 16, 0)
        swag_csv(full / "val.csv", 24, 1)
        shutil.copy(full / "val.csv", dev_only / "val.csv")
        return full, dev_only, {"max_seq_length": 24}
    return None, None, {}  # embedded: built in memory, evaluation skips its training half


def files_text(paths) -> dict[str, str]:
    return {os.path.basename(p): open(p).read() for p in paths}


@pytest.mark.parametrize("task", ["rte", "squad", "squad_v2", "conll2003", "swag", "embedded"])
def test_eval_with_only_the_dev_split_at_another_eval_batch_matches_the_full_folder(task, shared_data, minilm_tok,
                                                                                   minilm_vocab, tmp_path):
    full, dev_only, extra = task_folders(task, shared_data, tmp_path)
    plugins = {"squad": extra.pop("squad")} if "squad" in extra else {}
    fcfg = {"task": task, "max_seq_length": 64, "batch_size": 16, **extra}
    if task == "embedded":
        fcfg["train_subset"] = 64
    cfg = RunConfig(finetune=FinetuneConfig(data_dir=str(full) if full else "", **fcfg), plugins=plugins)
    model_cfg = tiny_bert(minilm_tok)
    # what finetuning builds (reads the training split) and what it saves as <stage>/best
    objective, _ = build_task(cfg, model_cfg, minilm_tok)
    assert objective.num_train > 0
    tcfg = finetune_train_config(cfg, objective.num_train)
    mesh = make_mesh(cfg.mesh)
    compiled = compile_objective(objective, tcfg, mesh)
    params = compiled.init_fn(jax.random.key(3)).params
    model_dir = tmp_path / "best"
    spec = getattr(objective, "spec", None)
    save_params(model_dir, jax.device_get(params["params"]), model_cfg, objective.head,
                extra={"task": task, "label_names": list(spec.labels) if getattr(spec, "labels", None) else None,
                       "num_labels": getattr(objective, "num_labels", None)}, tokenizer_files=[minilm_vocab])
    want, outputs = evaluate(objective, compiled, params, mesh, tcfg.batch_size, return_outputs=True)
    want_files = files_text(objective.write_predictions(outputs, tmp_path / "want", "dev"))

    # `ptm eval`: the folder holds the evaluated split alone, scored in batches of 40 (finetune.eval_batch_size;
    # the loop above: 16), so the last batch is padded differently and the predictions must still line up
    dev_cfg = RunConfig(finetune=FinetuneConfig(data_dir=str(dev_only) if dev_only else "", eval_batch_size=40,
                                                **fcfg), plugins=plugins)
    got = evaluate_task(dev_cfg, str(model_dir), split="dev", out_dir=str(tmp_path / "got"))
    assert "train" not in got["description"]
    assert set(got["metrics"]) == set(want) and len(want) >= 2
    for k, v in want.items():
        assert got["metrics"][k] == pytest.approx(v, rel=1e-6, abs=1e-6), k
    assert files_text(got["prediction_files"]) == want_files
    if task == "conll2003":  # labels came from ptm.json: 9 tags, their order as in the training file
        assert objective.spec.labels == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
        assert any(line.split()[2] != "O" for line in want_files["conll2003-dev.txt"].splitlines() if line)


def test_eval_without_label_names_or_with_the_wrong_head_is_a_config_error(shared_data, minilm_tok, minilm_vocab,
                                                                           tmp_path):
    from ptm_jax.objectives.finetune_registry import build_conll

    cfg = RunConfig(finetune=FinetuneConfig(task="conll2003", data_dir=str(shared_data / "conll2003")))
    with pytest.raises(ConfigError, match="no 'label_names'"):
        build_conll(cfg, tiny_bert(minilm_tok), minilm_tok, "dev", train=False, model_info={"num_labels": 9})
    cfg = RunConfig(finetune=FinetuneConfig(task="rte", data_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match="3 outputs.*rte has 2 labels"):
        build_task(cfg, tiny_bert(minilm_tok), minilm_tok, train=False, model_info={"num_labels": 3})
    cfg = RunConfig(finetune=FinetuneConfig(task="squad_v2", data_dir=str(tmp_path)))
    with pytest.raises(ConfigError, match=r"dev-v2\.0\.json does not exist"):
        build_task(cfg, tiny_bert(minilm_tok), minilm_tok, train=False, model_info={})
