"""A batch the mesh cannot divide is refused when the command starts, naming the field, the mesh and the nearest
valid sizes: `ptm run` refuses a finetuning batch before it pretrains, instead of JAX's IndivisibleError after."""
import pytest

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.errors import ConfigError
from ptm_jax.parallel.batch_check import check_batch, check_stage_batches, nearest_multiples
from test_cli_e2e import ptm


def test_nearest_multiples_below_and_above():
    assert nearest_multiples(12, 8) == [8, 16]
    assert nearest_multiples(32, 256) == [256]
    assert nearest_multiples(16, 8) == [16]


def test_pod_mesh_refuses_the_default_finetuning_batch_naming_field_mesh_and_sizes():
    # v5e-256 with mesh.data=-1: finetune.batch_size=32 split 256 ways
    with pytest.raises(ConfigError) as e:
        check_batch("finetune.batch_size", 32, MeshConfig(data=-1), 256)
    msg = str(e.value)
    assert msg.startswith("finetune.batch_size=32 does not divide over the mesh")
    assert "data x fsdp = 256 x 1 = 256 devices" in msg and "mesh.data=-1 takes 256" in msg
    assert "a multiple of 256 (nearest: 256)" in msg
    check_batch("finetune.batch_size", 512, MeshConfig(data=-1), 256)  # divides: no error
    check_batch("finetune.batch_size", 64, MeshConfig(data=-1, tensor=4), 256)  # 64 x 1 x 4


def test_microbatches_must_divide_too():
    with pytest.raises(ConfigError, match=r"train\.batch_size=32 in 4 microbatches of 8 rows .*"
                                          r"a multiple of 64 \(nearest: 64\)"):
        check_batch("train.batch_size", 32, MeshConfig(data=4, fsdp=4), 16, accum=4)
    check_batch("train.batch_size", 128, MeshConfig(data=4, fsdp=4), 16, accum=4)


def test_run_checks_both_stages_and_pretrain_only_its_own():
    cfg = load_config("bert_tiny", ["train.batch_size=16", "finetune.batch_size=12", "finetune.task='wnli'"])
    check_stage_batches(cfg, ["pretrain"], num_devices=8)
    with pytest.raises(ConfigError, match=r"^finetune\.batch_size=12 .* \(nearest: 8 or 16\)"):
        check_stage_batches(cfg, ["pretrain", "finetune"], num_devices=8)


def test_evaluation_batches_are_checked_where_set_and_take_the_stage_batch_at_0():
    cfg = load_config("bert_tiny", ["train.eval_batch_size=64", "finetune.eval_batch_size=40"])
    check_stage_batches(cfg, ["pretrain", "finetune"], num_devices=8)
    for field in ("train", "finetune"):
        bad = load_config("bert_tiny", [f"{field}.eval_batch_size=20"])
        with pytest.raises(ConfigError, match=rf"^{field}\.eval_batch_size=20 does not divide over the mesh.*"
                                              r"\(nearest: 16 or 24\)"):
            check_stage_batches(bad, ["pretrain", "finetune"], num_devices=8)
    with pytest.raises(ConfigError, match=r"finetune\.eval_batch_size must be >= 0 \(0: finetune\.batch_size\), "
                                          r"got -8"):
        load_config("bert_tiny", ["finetune.eval_batch_size=-8"])


def test_finetuning_on_a_sub_mesh_of_devices_per_host_divides_a_smaller_batch():
    """finetune.devices_per_host: the finetuning stage (and ptm eval) runs on that many devices of every host, so
    `ptm run` can pretrain on all of them and finetune with a batch the whole mesh cannot divide."""
    import jax

    from ptm_jax.parallel.mesh import finetune_devices, make_mesh

    cfg = load_config("bert_tiny", ["finetune.batch_size=12", "finetune.devices_per_host=4"])
    check_stage_batches(cfg, ["finetune"], num_devices=8)  # 12 over 4 devices
    mesh = make_mesh(cfg.mesh, finetune_devices(cfg))
    assert mesh.devices.size == 4 and list(mesh.devices.flat) == jax.devices()[:4]
    with pytest.raises(ConfigError, match=r"^finetune\.batch_size=12 .* \(nearest: 8 or 16\)"):
        check_stage_batches(load_config("bert_tiny", ["finetune.batch_size=12"]), ["finetune"], num_devices=8)
    too_many = load_config("bert_tiny", ["finetune.devices_per_host=16"])
    with pytest.raises(ConfigError, match=r"finetune\.devices_per_host=16 but each host \(process\) has 8 devices"):
        finetune_devices(too_many)
    with pytest.raises(ConfigError, match=r"finetune\.devices_per_host=16"):
        check_stage_batches(too_many, ["finetune"], num_devices=8)


@pytest.mark.slow
def test_cli_finetune_and_run_exit_2_without_traceback_before_any_stage(tmp_path, shared_data):
    glue = str(shared_data / "glue")
    r = ptm("finetune", "-c", "bert_small", f"output_dir={tmp_path / 'ft'}", "--task", "wnli", "--glue-dir", glue,
            "finetune.batch_size=12")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "IndivisibleError" not in r.stderr
    assert "ptm finetune: error: finetune.batch_size=12 does not divide over the mesh" in r.stderr
    assert "nearest: 8 or 16" in r.stderr
    run_dir = tmp_path / "run"
    r = ptm("run", "-c", "bert_tiny", f"output_dir={run_dir}", "--task", "wnli", "--glue-dir", glue,
            "finetune.batch_size=12", "train.steps=2")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "ptm run: error: finetune.batch_size=12" in r.stderr
    assert not (run_dir / "pretrain").exists()  # refused before pretraining, not after it
