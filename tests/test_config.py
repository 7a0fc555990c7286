"""Config system: presets, overrides, and the errors a user sees for a wrong key or value."""
import pytest

from ptm_jax.config import RunConfig, list_presets, load_config
from ptm_jax.errors import ConfigError


def test_presets_exist_with_exact_bert_sizes():
    assert {"bert_tiny", "bert_small", "bert_base", "bert_large"} <= set(list_presets())
    base, large = load_config("bert_base").model, load_config("bert_large").model
    assert (base.num_layers, base.hidden_size, base.num_heads, base.intermediate_size) == (12, 768, 12, 3072)
    assert (large.num_layers, large.hidden_size, large.num_heads, large.intermediate_size) == (24, 1024, 16, 4096)
    assert base.vocab_size == large.vocab_size == 30522


def test_override_any_field_with_literal_parsing():
    cfg = load_config("bert_tiny", ["train.steps=7", "train.learning_rate=3e-4", "model.scan_layers=true",
                                    "data.corpus=a/b*.txt", "mesh.data=2", "train.adam_b1=1"])
    assert cfg.train.steps == 7 and cfg.train.learning_rate == pytest.approx(3e-4)
    assert cfg.model.scan_layers is True and cfg.data.corpus == "a/b*.txt" and cfg.mesh.data == 2
    assert isinstance(cfg.train.adam_b1, float) and cfg.train.adam_b1 == 1.0


def test_misspelt_key_names_key_and_closest_valid_ones():
    with pytest.raises(ConfigError, match=r"'model\.hiden_size'.*model\.hidden_size"):
        load_config("bert_tiny", ["model.hiden_size=3"])
    with pytest.raises(ConfigError, match=r"'trian'.*train"):
        load_config("bert_tiny", ["trian.steps=3"])


def test_wrong_type_and_bad_choice_are_errors():
    with pytest.raises(ConfigError, match=r"train\.steps: expected int, got 'abc'"):
        load_config("bert_tiny", ["train.steps=abc"])
    with pytest.raises(ConfigError, match=r"model\.scan_layers: expected true/false"):
        load_config("bert_tiny", ["model.scan_layers=1"])
    with pytest.raises(ConfigError, match=r"'cudn'.*Did you mean cudnn"):
        load_config("bert_tiny", ["model.attention_impl=cudn"])
    with pytest.raises(ConfigError, match=r"divisible by model.num_heads"):
        load_config("bert_tiny", ["model.num_heads=3"])


def test_overrides_are_never_evaluated_as_code(tmp_path):
    marker = tmp_path / "pwned"
    cfg = load_config("bert_tiny", [f"name=__import__('os').system('touch {marker}')"])
    assert not marker.exists() and cfg.name.startswith("__import__")


def test_unknown_preset_and_bad_toml_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown preset 'bert_larg'.*bert_large"):
        load_config("bert_larg")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nsteps = 3\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_config(str(bad))
    typo = tmp_path / "typo.toml"
    typo.write_text('extends = "bert_tiny"\n[train]\nstepz = 3\n')
    with pytest.raises(ConfigError, match=r"train\.stepz.*train\.steps"):
        load_config(str(typo))


def test_defaults_are_bert_base_recipe():
    cfg = RunConfig()
    assert cfg.train.adam_eps == 1e-6 and cfg.train.weight_decay == 0.01 and cfg.train.clip_norm == 1.0
    assert cfg.data.masked_lm_prob == 0.15 and cfg.data.short_seq_prob == 0.1 and cfg.data.seed == 12345
