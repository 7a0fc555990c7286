"""The job and task registries: finetune.job picks one of the registered jobs, each job's section is read and
written back like a family's, the keys that moved out of [finetune] and the former job names as tasks are
ConfigErrors naming the new place, adapters are refused for the jobs they do not wrap, and GLUE is resolved in
one place (data/tasks/registry.py)."""
from __future__ import annotations

import re

import pytest

from ptm_jax.config import FinetuneConfig
from ptm_jax.config_loading import from_dict, load_config, to_dict
from ptm_jax.data.tasks import registry as tasks
from ptm_jax.errors import ConfigError
from ptm_jax.jobs import registry as jobs


def test_the_six_jobs_are_registered_with_their_sections():
    table = jobs.jobs()
    assert set(table) == {"task", "mtdnn", "consert", "features", "ulmfit", "cvt"}
    assert jobs.sections().keys() == {"mtdnn", "consert", "features", "ulmfit", "cvt"}
    assert [n for n, j in sorted(table.items()) if j.adapters] == ["consert", "task"]
    assert [n for n, j in sorted(table.items()) if j.build is not None] == ["consert", "task", "ulmfit"]
    # the [finetune] keys every job shares (the last added: eval_batch_size); a job's own keys live in its section
    assert FinetuneConfig().job == "task" and len(FinetuneConfig.__dataclass_fields__) == 26


def test_a_job_section_is_read_checked_and_written_back_at_top_level():
    cfg = load_config("bert_tiny", ["finetune.job=mtdnn", "mtdnn.tasks=['rte','stsb']", "mtdnn.answer=san"])
    assert cfg.plugins["mtdnn"].tasks == ["rte", "stsb"] and cfg.plugins["mtdnn"].answer == "san"
    out = to_dict(cfg)
    assert out["mtdnn"]["san_steps"] == 5 and "tasks" not in out["finetune"]
    back = from_dict(type(cfg), out)
    assert back.plugins["mtdnn"] == cfg.plugins["mtdnn"] and back.finetune == cfg.finetune
    with pytest.raises(ConfigError, match=r"consert.temperature: expected float"):
        load_config("bert_tiny", ["consert.temperature='hot'"])
    with pytest.raises(ConfigError, match=r"features.head: 'cnn' is not allowed"):
        load_config("bert_tiny", ["features.head=cnn"])


@pytest.mark.parametrize("override, says", [
    ("finetune.tasks=[rte]", "mtdnn.tasks (with finetune.job='mtdnn')"),
    ("finetune.mtdnn_answer=san", "mtdnn.answer (with finetune.job='mtdnn')"),
    ("finetune.consert_views=none,none", "consert.views (with finetune.job='consert')"),
    ("finetune.eval_data_dir=x", "consert.eval_data_dir (with finetune.job='consert')"),
    ("finetune.head=textcnn", "features.head (with finetune.job='features')"),
    ("finetune.feature_norm=layer", "features.feature_norm (with finetune.job='features')"),
    ("finetune.doc_stride=64", "finetune.doc_stride': it moved to squad.doc_stride (the [squad] section of the "
     "span-QA tasks squad and squad_v2)"),
    ("finetune.null_score_threshold=1.0", "it moved to squad.null_score_threshold"),
    ("finetune.max_query_length=32", "it moved to squad.max_query_length"),
    ("finetune.n_best_size=5", "it moved to squad.n_best_size"),
    ("finetune.max_answer_length=10", "it moved to squad.max_answer_length"),
    ("finetune.pack_examples=true", "it moved to packing.pack_examples (the [packing] section"),
    ("finetune.max_examples_per_row=4", "it moved to packing.max_examples_per_row"),
    ("finetune.lm_coef=0.0", "it moved to gpt_finetune.lm_coef (the [gpt_finetune] section of GPT's finetuning)"),
    ("data.target_lm_steps=5", "'data.target_lm_steps': it moved to the finetuning job's own section, "
     "ulmfit.target_lm_steps (with finetune.job='ulmfit')"),
    ("finetune.task=mtdnn", "set finetune.job=mtdnn"),
    ("finetune.task=consert", "set finetune.job=consert"),
    ("finetune.job=mtdn", "not a registered finetuning job .* Did you mean 'mtdnn'"),
])
def test_moved_keys_and_former_job_names_are_config_errors_naming_the_new_place(override, says):
    with pytest.raises(ConfigError, match=re.escape(says) if "*" not in says else says):
        load_config("bert_tiny", [override])


def test_an_old_toml_with_a_moved_finetune_key_names_the_new_key(tmp_path):
    old = tmp_path / "old.toml"
    old.write_text('extends = "bert_tiny"\n[finetune]\ntask = "squad"\ndoc_stride = 64\n')
    with pytest.raises(ConfigError, match=r"'finetune.doc_stride': it moved to squad.doc_stride"):
        load_config(str(old))


def test_task_and_family_sections_are_read_checked_defaulted_and_written_back():
    from ptm_jax.config_loading import section
    from ptm_jax.data.tasks import sections

    assert sections.sections().keys() == {"squad", "packing", "tagging", "gpt_finetune"}
    cfg = load_config("bert_tiny", ["squad.doc_stride=64", "packing.pack_examples=true"])
    assert section(cfg, "squad").doc_stride == 64 and section(cfg, "squad").max_query_length == 64
    assert section(cfg, "packing").pack_examples and section(cfg, "packing").max_examples_per_row == 8
    out = to_dict(cfg)
    assert out["squad"]["doc_stride"] == 64 and "doc_stride" not in out["finetune"] and "gpt_finetune" not in out
    assert from_dict(type(cfg), out).plugins == cfg.plugins
    # the defaults, unchanged from the former [finetune] fields (google-research/bert run_squad.py; GPT-1's 0.5)
    plain = load_config("bert_tiny")
    assert (section(plain, "squad").doc_stride, section(plain, "squad").max_query_length,
            section(plain, "squad").n_best_size, section(plain, "squad").max_answer_length,
            section(plain, "squad").null_score_threshold) == (128, 64, 20, 30, 0.0)
    assert not section(plain, "packing").pack_examples and section(plain, "packing").max_examples_per_row == 8
    assert section(plain, "gpt_finetune").lm_coef == 0.5 and section(load_config("gpt1"), "gpt_finetune").lm_coef == 0.5
    with pytest.raises(ConfigError, match=r"squad.doc_stride must be >= 1, got 0"):
        load_config("bert_tiny", ["squad.doc_stride=0"])
    with pytest.raises(ConfigError, match=r"gpt_finetune.lm_coef: expected float"):
        load_config("gpt_tiny", ["gpt_finetune.lm_coef='big'"])


def test_ulmfit_presets_pick_the_ulmfit_job_and_its_section_reaches_it():
    for preset in ("ulmfit", "ulmfit_tiny"):
        assert load_config(preset).finetune.job == "ulmfit"
    from ptm_jax.config_loading import section

    cfg = load_config("ulmfit_tiny", ["ulmfit.target_lm_steps=7"])
    assert section(cfg, "ulmfit").target_lm_steps == 7
    assert section(load_config("ulmfit_tiny"), "ulmfit").target_lm_steps == 0
    with pytest.raises(ConfigError, match=r"ulmfit.target_lm_steps must be >= 0"):
        load_config("ulmfit_tiny", ["ulmfit.target_lm_steps=-1"])


def test_an_adapter_is_refused_for_a_job_it_does_not_wrap_and_eval_for_a_job_without_a_model_reader(tmp_path):
    for job in ("mtdnn", "features"):
        with pytest.raises(ConfigError, match=rf"finetune.adapter='lora' is not implemented for finetune.job='{job}'"):
            load_config("bert_tiny", [f"finetune.job={job}", "finetune.adapter=lora"])
    load_config("bert_tiny", ["finetune.job=consert", "finetune.adapter=lora"])  # no error
    from ptm_jax.train.evaluation import evaluate_task

    cfg = load_config("bert_tiny", ["finetune.job=mtdnn", f"output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"ptm eval does not read the models of finetune.job='mtdnn'.*consert, "
                                          r"cvt, features, task"):
        evaluate_task(cfg, str(tmp_path / "missing"))
    cfg = load_config("bert_tiny", ["finetune.job=features", f"output_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"missing: no feature_model.json in it; a kept model of "
                                          r"finetune.job='features' is <run>/finetune-<task>/best"):
        evaluate_task(cfg, str(tmp_path / "missing"))


def test_tasks_are_declared_once_and_glue_is_read_through_one_function(shared_data):
    from ptm_jax.data.tasks.glue import read_glue

    assert set(tasks.TASKS) >= {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "ax",
                                "embedded", "squad", "squad_v2", "conll2003", "swag"}
    assert tasks.get("SST-2") is tasks.TASKS["sst2"] and tasks.get("sts-b").primary == "spearman"
    assert tasks.TASKS["stsb"].kind == "regression" and tasks.TASKS["conll2003"].head == "token_classification"
    rank = tasks.get("mrpc_rank", where="mtdnn.tasks")
    assert rank.kind == "ranking" and rank.pair
    with pytest.raises(ConfigError, match=r"sst2_rank: a ranking task is built from a GLUE sentence-pair task"):
        tasks.get("sst2_rank")
    with pytest.raises(ConfigError, match=r"finetune.task='sqad' is not one of: .* Did you mean 'squad'"):
        tasks.get("sqad", among=tasks.FINETUNE_TASKS)
    assert tasks.glue_split("mnli", "dev") == "dev_matched" and tasks.glue_split("rte", "dev") == "dev"
    rows = tasks.glue_rows(str(shared_data / "glue"), "RTE", "dev")
    want, _ = read_glue(shared_data / "glue", "rte", "dev")
    assert len(rows) == len(want) == 277 and [e.text_a for e in rows] == [e.text_a for e in want]
    with pytest.raises(ConfigError, match=r"finetune.data_dir is empty: set it to the GLUE folder \(holding RTE/\)"):
        tasks.glue_rows("", "rte", "train")
    assert tasks.take_subset(list(range(10)), 3, 0) == tasks.take_subset(list(range(10)), 3, 0)
    assert sorted(tasks.take_subset(list(range(10)), 0, 0)) == list(range(10))
