"""Pretraining trains like the reference, step by step, for the recurrent and feed-forward LM objectives: ULMFiT's
AWD-LSTM LM against fastai's AWD-LSTM (tests/fastai_lm_reference.py), ELMo's biLM against AllenNLP's ELMo modules
wired as allenai/bilm-tf trains them (tests/bilm_reference.py), NNLM against a PyTorch model written from Bengio et
al. 2003 (tests/bengio_reference.py).

Each test: the same initial parameters on both sides, ptm's own batches (the objective's stream, as ``fit`` reads
it) fed to the reference, dropout off, ptm's optimizer, clipping, weight-decay exclusions and schedule rebuilt from
the reference framework's pieces; 24 steps at a tiny shape on one device; every per-step loss within 1e-4 and the
final parameters within 1e-4. benchmarks/pretrain_parity_recurrent.py runs 300 steps at a larger shape and the
dropout-on comparison (docs/benchmarks.md, "Pretraining trains like the reference")."""
from __future__ import annotations

import jax
import numpy as np
import pytest
import reference_libs
import trajectory

from ptm_jax.config import MeshConfig
from ptm_jax.config_loading import load_config
from ptm_jax.objectives.registry import build_objective
from ptm_jax.parallel.mesh import make_mesh
from ptm_jax.train.stages import prepare_corpus, pretrain_param_groups

torch = pytest.importorskip("torch")
torch.set_num_threads(1)  # the references' tiny matmuls: a second thread only waits (and the suite runs 2 workers)

STEPS, VOCAB = 24, 300
LOSS_TOL, PARAM_TOL = 1e-4, 1e-4


@pytest.fixture(scope="module")
def shakespeare(shared_data) -> list[str]:
    return (shared_data / "corpus/tinyshakespeare/input.txt").read_text(encoding="utf-8").splitlines(True)


def _prepare(preset: str, lines: list[str], out, extra: list[str]):
    """The preset's objective over ``lines`` (a file of one document per line), through ptm's corpus preparation
    (word vocabulary of ``VOCAB`` entries, token cache, the family's artifacts)."""
    corpus = out / "corpus.txt"
    corpus.write_text("".join(lines), encoding="utf-8")
    cfg = load_config(preset, [f"output_dir={out}", f"data.corpus={corpus}", "data.format=lines",
                               f"tokenizer.vocab_size={VOCAB}", f"model.vocab_size={VOCAB}", f"train.steps={STEPS}",
                               *extra])
    corp = prepare_corpus(cfg)
    return cfg, corp, build_objective(cfg, corp)


def _one_device():
    return make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])


def test_ulmfit_lm_trains_like_fastai_awd_lstm_with_stlr_and_discriminative_rates(shakespeare, tmp_path):
    """fastai's initialisation imported; fastai Adam (betas 0.8, 0.99, decoupled wd 0.01, none on the biases:
    ``do_wd``), clip 0.4, slanted triangular rates, discriminative rates per ``awd_lstm_lm_split`` group, AR/TAR,
    variable BPTT, the hidden state carried across batches and reset where ptm's stream starts a pass. The two
    PyTorch gate biases of each layer train as two parameters in ptm too (a single summed bias drifted 1.6e-2 from
    fastai's loss within 40 steps), and pretraining decays the recurrent kernels (it used to decay only leaves
    named ``kernel``)."""
    if not reference_libs.use("fastai"):
        pytest.skip(reference_libs.missing("fastai"))
    import fastai_lm_reference as ref

    from ptm_jax.families.ulmfit.weights import import_state_dict

    groups = ",".join(f'{{"pattern": "ulmfit/layers_{i}/", "lr": {2.6 ** -(3 - i)}}}' for i in range(3))
    cfg, corp, obj = _prepare("ulmfit_tiny", shakespeare[:150], tmp_path, [  # a pass: about 12 steps
        "model.embed_dim=16", "model.hidden_dim=24", "data.max_seq_length=10", "data.bptt_std=2.0",
        "data.bptt_bucket=16", "train.batch_size=8", "train.optimizer=adamw", "train.adam_bias_correction=true",
        "train.learning_rate=0.03", "train.lr_decay=slanted_triangular", "train.warmup_steps=3",
        "train.weight_decay=0.01", "train.clip_norm=0.4", f"train.param_groups=[{groups}]",
        *(f"model.{p}=0" for p in ("output_p", "hidden_p", "input_p", "embed_p", "weight_p"))])
    model = ref.build(cfg.model, 0, corp.tokenizer.pad_id)
    params = {"params": import_state_dict(ref.state_arrays(model), cfg.model)}
    ours = trajectory.run_ptm(obj, cfg.train, _one_device(), STEPS, params, pretrain_param_groups(cfg))
    theirs = ref.train(model, ours.batches, cfg.train, cfg.model, [2.6 ** -3, 2.6 ** -2, 2.6 ** -1, 1.0])
    widths = {int(b["target_weights"][0].sum()) for b in ours.batches}
    assert len(widths) > 3 and sum(int(b["reset"][0]) for b in ours.batches) >= 2  # variable BPTT, passes restart
    assert trajectory.loss_gap(ours.losses, theirs) < LOSS_TOL, np.abs(ours.losses - theirs)
    gap, where = trajectory.param_gap(ours.params, {"params": import_state_dict(ref.state_arrays(model),
                                                                                cfg.model)})
    assert gap < PARAM_TOL, (gap, where)
    assert ours.losses[-1] < ours.losses[0] - 0.3, ours.losses.tolist()  # it trained


def _elmo_against_allennlp(lines, out, dtype: str):
    """ptm's ELMo and AllenNLP's modules, both in ``dtype``, from one start over ptm's batches: (ptm's trajectory,
    the reference's per-step losses, the final parameters' largest gap and its leaf, the unroll length)."""
    import bilm_reference as ref

    if ref.load_allennlp_elmo() is None:
        pytest.skip(reference_libs.missing("allennlp"))
    from ptm_jax.families.elmo.weights import load_bilm

    cfg, _, obj = _prepare("elmo_tiny", lines, out, [
        "model.max_characters_per_token=50", "model.num_sampled=0", "model.dropout=0", "model.lstm_dim=32",
        "data.max_seq_length=8", "train.batch_size=8", "train.adagrad_initial_accumulator=1.0",
        f"model.dtype={dtype}"])
    mesh = _one_device()
    init = jax.tree.map(lambda a: np.asarray(a, np.float32), trajectory.initial_params(obj, cfg.train, mesh))
    files = ref.write_bilm_tf(init["params"], cfg.model, out / "init")  # bilm-tf's files hold float32
    tree, _ = load_bilm(*files)
    assert trajectory.param_gap(init["params"], tree) == (0.0, "")  # the bilm-tf layout round trip is exact
    tree = jax.tree.map(lambda a: np.asarray(a, dtype), tree)
    ours = trajectory.run_ptm(obj, cfg.train, mesh, STEPS, {"params": tree}, pretrain_param_groups(cfg))
    model = ref.build(*files).to(getattr(torch, dtype))
    theirs = ref.train(model, ours.batches, obj.char_table, cfg.train, cfg.model)
    mine = ref.state_arrays(ref.build(*ref.write_bilm_tf(ours.params["params"], cfg.model, out / "final")))
    done = ref.state_arrays(model)
    gap = max((float(np.abs(mine[k] - done[k]).max()), k) for k in done)
    return ours, theirs, gap, cfg.data.max_seq_length


def test_elmo_bilm_trains_like_allennlps_modules_in_bilm_tfs_training_graph(shakespeare, tmp_path):
    """ptm's initialisation written as bilm-tf's weights.hdf5, read by ptm's import and AllenNLP's loaders;
    AdaGrad as TensorFlow's ApplyAdagrad (accumulators from 1.0, no epsilon) on the gradients of loss x unroll
    steps, global-norm clip 10 as tf.clip_by_global_norm, the LSTM states of both directions carried across
    batches, full softmax. Before ptm scaled its loss by the unroll length as bilm-tf does, its steps were a
    different size from bilm-tf's."""
    ours, theirs, (gap, where), unroll = _elmo_against_allennlp(shakespeare[:1200], tmp_path, "float32")
    np.testing.assert_allclose(ours.losses, ours.terms["lm_loss"] * unroll, rtol=1e-6)  # the loss x unroll
    assert trajectory.loss_gap(ours.terms["lm_loss"], theirs) < LOSS_TOL, np.abs(ours.terms["lm_loss"] - theirs)
    assert gap < PARAM_TOL, (gap, where)
    assert theirs[-1] < theirs[0] - 0.5


def test_elmo_bilm_in_float64_trains_like_allennlp_in_float64_to_1e12(shakespeare, tmp_path):
    """``model.dtype='float64'`` (JAX's 64-bit mode) against AllenNLP's modules in float64 on the same start and
    batches: with no float32 rounding to amplify, every per-step loss agrees to 1e-12 (1.8e-15 when written;
    an optimizer epsilon of 1e-7 inside AdaGrad's square root, or torch's 1e-6 in its clipping norm, showed here as
    gaps of 1e-7 within 5 steps). The final parameters compare through bilm-tf's float32 files."""
    with jax.enable_x64(True):
        ours, theirs, (gap, where), _ = _elmo_against_allennlp(shakespeare[:1200], tmp_path, "float64")
    assert {str(a.dtype) for a in jax.tree.leaves(ours.params)} == {"float64"}
    assert trajectory.loss_gap(ours.terms["lm_loss"], theirs) < 1e-12, np.abs(ours.terms["lm_loss"] - theirs)
    assert gap < 1e-6, (gap, where)  # float32 rounding of the files
    assert theirs[-1] < theirs[0] - 0.5


def test_nnlm_trains_like_a_pytorch_bengio_model_written_from_the_paper(shakespeare, tmp_path):
    """ptm's initialisation mapped onto the PyTorch model; torch Adam with its L2 weight decay on C, H, U and W
    but not the biases, clip_grad_norm_, LambdaLR warmup then linear decay."""
    import bengio_reference as ref

    cfg, _, obj = _prepare("nnlm_tiny", shakespeare[:1200], tmp_path, [
        "model.direct=true", "train.batch_size=8", "train.warmup_steps=4", "train.lr_decay=bert",
        "train.learning_rate=8e-3", "train.weight_decay=1e-3"])
    mesh = _one_device()
    init = trajectory.initial_params(obj, cfg.train, mesh)
    model = ref.build(cfg.model)
    ref.load_ptm(model, init["params"])
    assert trajectory.param_gap(init["params"], ref.as_ptm(model)) == (0.0, "")
    ours = trajectory.run_ptm(obj, cfg.train, mesh, STEPS, init, pretrain_param_groups(cfg))
    theirs = ref.train(model, ours.batches, cfg.train, cfg.model.order)
    assert trajectory.loss_gap(ours.losses, theirs) < LOSS_TOL, np.abs(ours.losses - theirs)
    gap, where = trajectory.param_gap(ours.params["params"], ref.as_ptm(model))
    assert gap < PARAM_TOL, (gap, where)
    assert ours.losses[-1] < ours.losses[0] - 0.3


def test_pretraining_takes_the_familys_parameter_groups():
    """ULMFiT and NNLM decay every weight (ULMFiT's recurrent kernels included) and no bias; a family without its
    own groups keeps the optimizer's default (leaves named kernel or embedding)."""
    from ptm_jax.train import param_groups as pg

    layer = {"kernel": np.ones((2, 8)), "recurrent_kernel": np.ones((2, 8)), "bias": np.ones(8),
             "recurrent_bias": np.ones(8)}
    tree = {"params": {"ulmfit": {"embedding": np.ones((5, 2)), "layers_0": layer}, "lm_head": {"bias": np.ones(5)}}}
    rules = pretrain_param_groups(load_config("ulmfit_tiny", ["model.num_layers=1"]))
    decay = pg.multipliers(rules, tree, "weight_decay")["params"]
    assert decay["ulmfit"]["layers_0"] == {"kernel": 1.0, "recurrent_kernel": 1.0, "bias": 0.0,
                                           "recurrent_bias": 0.0}
    assert decay["ulmfit"]["embedding"] == 1.0 and decay["lm_head"]["bias"] == 0.0
    nnlm = {"params": {"nnlm": {"embedding": np.ones((5, 2)), "hidden": {"kernel": np.ones((2, 3)),
                                                                          "bias": np.ones(3)}}}}
    d = pg.multipliers(pretrain_param_groups(load_config("nnlm_tiny")), nnlm, "weight_decay")["params"]["nnlm"]
    assert d == {"embedding": 1.0, "hidden": {"kernel": 1.0, "bias": 0.0}}
    assert pretrain_param_groups(load_config("elmo_tiny")) is None
