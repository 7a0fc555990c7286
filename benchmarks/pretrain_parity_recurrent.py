"""Training-trajectory parity of the recurrent and feed-forward pretraining objectives against reference
implementations the project did not write: ULMFiT's AWD-LSTM LM against fastai 2.8's AWD-LSTM, ELMo's biLM against
AllenNLP 2.10's ELMo modules wired as allenai/bilm-tf trains them, NNLM against a PyTorch model of Bengio et al.
2003 written from the paper (tests/fastai_lm_reference.py, tests/bilm_reference.py, tests/bengio_reference.py).

For each objective, at a small shape:

1. dropout off: both sides start from the same parameters (ULMFiT: fastai's initialisation imported with
   ``families/ulmfit/weights.py``; ELMo: ptm's initialisation written as bilm-tf's ``weights.hdf5``, read back by
   ptm's import and by AllenNLP's loaders; NNLM: ptm's initialisation through the reference's stated mapping),
   and the reference is fed ptm's own stream, batch by batch, with ptm's optimizer, clipping, weight-decay
   exclusions and schedule rebuilt from the framework's own pieces. Reported: the largest per-step loss gap over
   ``--steps`` steps and the largest parameter difference at the end.
   Beside it, the float32 rounding the comparison cannot remove: the same reference run again in float64 from
   the same start on the same batches; reported are the largest loss gap of ptm's (float32) trajectory to that
   float64 one and of the reference's own float32 trajectory to it (NNLM: the final parameters' gaps too). Where
   ptm's is of the reference's size, the gap between the two float32 runs is rounding that the training
   amplifies, not a different computation. ``--control ulp`` (ELMo) also runs ptm again from every initial
   parameter moved by one unit in the last place: ptm's own float32 run against a copy one rounding step away.
   ELMo also runs ptm itself in float64 (``model.dtype='float64'`` in JAX's 64-bit mode) from the same start on the
   same batches, against the reference's float64 run: the loss gap of the two computations with no float32
   rounding left to amplify (its final parameters compare through bilm-tf's float32 files).
2. dropout on (the preset's rates): ``--seeds`` seeds per side (the dropout masks; NNLM has no dropout, so its
   seeds draw the initialisation on each side): ptm's mean over seeds of the mean loss of the last 50 steps,
   against the reference's per-seed range.

The corpus is the first ``--lines`` lines of WikiText-2's tokenized valid.txt (../shared/data), read as lines with
a word vocabulary of ``--vocab`` entries built by ``ptm``'s own corpus preparation. Reference libraries: fastai and
AllenNLP from the folders the README's test command fills (tests/reference_libs.py). Run from the repository root:

    python benchmarks/pretrain_parity_recurrent.py --steps 300 --seeds 3 --json /tmp/parity.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # the references' tiny matmuls: threads only wait on each other
# the dropout-on seeds of an objective run one program: compile it once
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "ptm_parity_recurrent_xla"))
DATA = REPO.parent / "shared" / "data" / "corpus" / "wikitext-2-tokenized" / "valid.txt"
OBJECTIVES = ("ulmfit", "elmo", "nnlm")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3, help="dropout-on runs per side (0: skip item 2)")
    ap.add_argument("--lines", type=int, default=1000, help="lines of valid.txt (1000: about 180 ULMFiT steps "
                    "a pass, so the carried state is reset once within 300 steps)")
    ap.add_argument("--vocab", type=int, default=2000)
    ap.add_argument("--objectives", default=",".join(OBJECTIVES))
    ap.add_argument("--control", default="", choices=["", "ulp"],
                    help="ELMo: ptm once more from every initial parameter moved one unit in the last place (ulp): "
                         "how far float32 rounding alone carries ptm's own run at this shape")
    ap.add_argument("--json", default="")
    return ap.parse_args(argv)


def _config(preset: str, out: Path, corpus: Path, vocab: int, steps: int, extra: list[str]):
    from ptm_jax.config_loading import load_config

    return load_config(preset, [f"output_dir={out}", f"data.corpus={corpus}", "data.format=lines",
                                f"tokenizer.vocab_size={vocab}", f"model.vocab_size={vocab}", f"train.steps={steps}",
                                *extra])


ULMFIT = ["model.embed_dim=64", "model.hidden_dim=128", "model.num_layers=3", "model.lstm_impl=scan",
          "data.max_seq_length=20", "data.bptt_std=2.0", "data.bptt_bucket=32", "train.batch_size=16",
          "train.optimizer=adamw", "train.adam_bias_correction=true", "train.adam_b1=0.8", "train.adam_b2=0.99",
          "train.learning_rate=0.01", "train.lr_decay=slanted_triangular", "train.weight_decay=0.01",
          "train.clip_norm=0.4"]
"""configs/ulmfit.toml's optimizer and schedule (AdamW with bias correction, betas (0.8, 0.99), wd 0.01 on the
weights, clip 0.4, slanted triangular rates rising over the first 10%) and AR 2 / TAR 1, at a small shape."""
ULMFIT_DROPOUTS = ("output_p", "hidden_p", "input_p", "embed_p", "weight_p")
DISCRIMINATIVE = 2.6
"""ULMFiT's discriminative rates (Sec. 3.2) on fastai's LM layer groups (``awd_lstm_lm_split``): LSTM layer i of n
at lr / 2.6^(n - i), the embedding (tied to the decoder) with the decoder at lr."""


def ulmfit(out: Path, corpus: Path, args, mesh) -> dict:
    import numpy as np

    import fastai_lm_reference as ref
    import trajectory
    from ptm_jax.config import ParamGroupConfig
    from ptm_jax.families.ulmfit.weights import import_state_dict
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import pretrain_param_groups, prepare_corpus

    n = 3
    groups = [f'{{"pattern": "ulmfit/layers_{i}/", "lr": {DISCRIMINATIVE ** -(n - i)}}}' for i in range(n)]
    base = [*ULMFIT, f"train.warmup_steps={max(args.steps // 10, 1)}", f"train.param_groups=[{','.join(groups)}]"]
    quiet = [f"model.{p}=0" for p in ULMFIT_DROPOUTS]
    cfg = _config("ulmfit_tiny", out, corpus, args.vocab, args.steps, base + quiet)
    assert all(isinstance(g, ParamGroupConfig) for g in cfg.train.param_groups)
    corp = prepare_corpus(cfg)
    pad = corp.tokenizer.pad_id
    mults = [DISCRIMINATIVE ** -(n - i) for i in range(n)] + [1.0]
    rules = pretrain_param_groups(cfg)

    def one(c, seed: int, init_seed: int = 0):
        obj = build_objective(c, corp)
        model = ref.build(c.model, init_seed, pad)
        params = {"params": import_state_dict(ref.state_arrays(model), c.model)}
        ours = trajectory.run_ptm(obj, c.train, mesh, args.steps, params, rules, seed=seed)
        _log(f"ulmfit seed {seed}: ptm")
        import torch

        torch.manual_seed(1000 + seed)
        theirs = ref.train(model, ours.batches, c.train, c.model, mults, no_decay="bias")
        _log(f"ulmfit seed {seed}: fastai")
        return ours, theirs, {"params": import_state_dict(ref.state_arrays(model), c.model)}

    ours, theirs, final = one(cfg, 0)
    model64 = ref.build(cfg.model, 0, pad).double()
    exact = ref.train(model64, ours.batches, cfg.train, cfg.model, mults, no_decay="bias")
    _log("ulmfit: fastai in float64")
    row = {"objective": "ULMFiT AWD-LSTM LM", "reference": "fastai 2.8.12 AWD_LSTM + LinearDecoder, fastai Adam",
           "shape": f"V {args.vocab}, emb 64, hid 128, 3 layers, batch 16, BPTT ~20 (variable)",
           "steps": args.steps, "loss_gap": trajectory.loss_gap(ours.losses, theirs),
           "param_gap": trajectory.param_gap(ours.params, final), "first_loss": float(ours.losses[0]),
           "last_loss": float(ours.losses[-1]), **_float64(ours.losses, theirs, exact)}
    if args.seeds:
        on = _config("ulmfit_tiny", out, corpus, args.vocab, args.steps, base)
        runs = [one(on, s) for s in range(args.seeds)]
        row["dropout_on"] = _seed_ranges([r[0].losses for r in runs], [r[1] for r in runs])
    return row


ELMO = ["model.max_characters_per_token=50", "model.num_sampled=0", "model.filters=[[1,16],[2,16],[3,32]]",
        "model.n_highway=1", "model.projection_dim=32", "model.lstm_dim=128", "model.n_layers=2",
        "data.max_seq_length=20", "train.batch_size=16", "train.adagrad_initial_accumulator=1.0",
        "train.learning_rate=0.2", "train.clip_norm=10.0"]
"""bilm-tf's training settings (Adagrad 0.2 with accumulators from 1.0, global-norm clip 10, unroll 20) at a small
shape; the full softmax (the sampled one's draws are random)."""


def elmo(out: Path, corpus: Path, args, mesh) -> dict:
    import jax
    import numpy as np

    import bilm_reference as ref
    import trajectory
    from ptm_jax.families.elmo.weights import load_bilm
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import pretrain_param_groups, prepare_corpus

    cfg = _config("elmo_tiny", out, corpus, args.vocab, args.steps, ELMO + ["model.dropout=0"])
    corp = prepare_corpus(cfg)
    obj = build_objective(cfg, corp)
    init = trajectory.initial_params(obj, cfg.train, mesh)
    files = ref.write_bilm_tf(init["params"], cfg.model, out / "init")
    tree, _ = load_bilm(*files)
    assert trajectory.param_gap(init["params"], tree)[0] == 0.0, "bilm-tf layout round trip"
    rules = pretrain_param_groups(cfg)

    def one(c, seed: int):
        import torch

        o = build_objective(c, corp)
        ours = trajectory.run_ptm(o, c.train, mesh, args.steps, {"params": tree}, rules, seed=seed)
        _log(f"elmo seed {seed}: ptm")
        model = ref.build(*files)
        torch.manual_seed(1000 + seed)
        theirs = ref.train(model, ours.batches, o.char_table, c.train, c.model)
        _log(f"elmo seed {seed}: AllenNLP")
        return ours, theirs, model

    ours, theirs, model = one(cfg, 0)
    model64 = ref.build(*files).double()
    exact = ref.train(model64, ours.batches, obj.char_table, cfg.train, cfg.model)
    _log("elmo: AllenNLP in float64")
    with jax.enable_x64(True):  # ptm in float64 from the same start: the computation itself, without rounding
        cfg64 = _config("elmo_tiny", out, corpus, args.vocab, args.steps, ELMO + ["model.dropout=0",
                                                                                 "model.dtype=float64"])
        ours64 = trajectory.run_ptm(build_objective(cfg64, corp), cfg64.train, mesh, args.steps,
                                    {"params": jax.tree.map(lambda a: np.asarray(a, np.float64), tree)}, rules)
    _log("elmo: ptm in float64")
    assert all(np.array_equal(a[k], b[k]) for a, b in zip(ours.batches, ours64.batches) for k in a)
    # bilm-tf's files and AllenNLP's loaders hold float32: the final parameters compare to float32 rounding
    mine64 = ref.state_arrays(ref.build(*ref.write_bilm_tf(ours64.params["params"], cfg.model, out / "final64")))
    mine = ref.state_arrays(ref.build(*ref.write_bilm_tf(ours.params["params"], cfg.model, out / "final")))
    done = ref.state_arrays(model)
    gap = max((float(np.abs(mine[k] - done[k]).max()), k) for k in done)
    row = {"objective": "ELMo biLM", "reference": "AllenNLP 2.10.1 _ElmoCharacterEncoder + ElmoLstm cells, "
           "bilm-tf's training graph, torch Adagrad with TF's step (no epsilon) and TF's global-norm clip",
           "shape": f"V {args.vocab}, 3 char filters (64), 1 highway, 2 x LSTMP 128->32 per direction, batch 16, "
           "unroll 20", "steps": args.steps, "loss_gap": trajectory.loss_gap(ours.terms["lm_loss"], theirs),
           "param_gap": gap, "first_loss": float(theirs[0]), "last_loss": float(theirs[-1]),
           **_float64(ours.terms["lm_loss"], theirs, exact),
           "float64_loss_gap": trajectory.loss_gap(ours64.terms["lm_loss"], exact),
           "float64_param_gap": max((float(np.abs(mine64[k] - v).max()), k)
                                    for k, v in ref.state_arrays(model64).items())}
    if args.control == "ulp":
        moved = jax.tree.map(lambda a: np.nextafter(np.asarray(a, np.float32), np.float32(np.inf)), tree)
        again = trajectory.run_ptm(build_objective(cfg, corp), cfg.train, mesh, args.steps, {"params": moved}, rules)
        _log("elmo: ptm from one ulp away")
        row["ptm_vs_itself_ulp"] = trajectory.loss_gap(again.terms["lm_loss"], ours.terms["lm_loss"])
    if args.seeds:
        on = _config("elmo_tiny", out, corpus, args.vocab, args.steps, ELMO + ["model.dropout=0.1"])
        runs = [one(on, s) for s in range(args.seeds)]
        row["dropout_on"] = _seed_ranges([r[0].terms["lm_loss"] for r in runs], [r[1] for r in runs])
    return row


NNLM = ["model.order=5", "model.embed_dim=32", "model.hidden_dim=64", "model.direct=false",
        "data.max_seq_length=16", "train.batch_size=32", "train.optimizer=adam", "train.learning_rate=8e-3",
        "train.lr_decay=bert", "train.weight_decay=1e-5", "train.clip_norm=1.0"]
"""configs/nnlm_small.toml's model kind and optimizer (Adam 8e-3, warmup then linear decay, L2 1e-5 on the
weights and C, clip 1) at a small shape."""


def nnlm(out: Path, corpus: Path, args, mesh) -> dict:
    import bengio_reference as ref
    import trajectory
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.train.stages import pretrain_param_groups, prepare_corpus

    cfg = _config("nnlm_tiny", out, corpus, args.vocab, args.steps,
                  NNLM + [f"train.warmup_steps={max(args.steps // 10, 1)}"])
    corp = prepare_corpus(cfg)
    obj = build_objective(cfg, corp)
    rules = pretrain_param_groups(cfg)
    init = trajectory.initial_params(obj, cfg.train, mesh)
    model = ref.build(cfg.model)
    ref.load_ptm(model, init["params"])
    assert trajectory.param_gap(init["params"], ref.as_ptm(model))[0] == 0.0
    ours = trajectory.run_ptm(obj, cfg.train, mesh, args.steps, init, rules)
    theirs = ref.train(model, ours.batches, cfg.train, cfg.model.order)
    model64 = ref.build(cfg.model).double()
    ref.load_ptm(model64, init["params"])
    exact = ref.train(model64, ours.batches, cfg.train, cfg.model.order)
    row = {"objective": "NNLM (Bengio et al. 2003)", "reference": "PyTorch model written from the paper, "
           "torch Adam + LambdaLR", "shape": f"V {args.vocab}, n 5, m 32, h 64, no direct, batch 32 x 16",
           "steps": args.steps, "loss_gap": trajectory.loss_gap(ours.losses, theirs),
           "param_gap": trajectory.param_gap(ours.params["params"], ref.as_ptm(model)),
           "first_loss": float(ours.losses[0]), "last_loss": float(ours.losses[-1]),
           **_float64(ours.losses, theirs, exact),
           **_float64_params(ours.params["params"], ref.as_ptm(model), ref.as_ptm(model64))}
    if args.seeds:  # no dropout: the seed draws the initialisation, each side with its own generator
        ptm_runs, ref_runs = [], []
        for s in range(args.seeds):
            ptm_runs.append(trajectory.run_ptm(obj, cfg.train, mesh, args.steps, None, rules, seed=100 + s).losses)
            m = ref.build(cfg.model)
            ref.init_as_ptm_states(m, cfg.model.init_std, 100 + s)
            ref_runs.append(ref.train(m, ours.batches, cfg.train, cfg.model.order))
            _log(f"nnlm init seed {100 + s}")
        row["dropout_on"] = _seed_ranges(ptm_runs, ref_runs)
        row["dropout_on"]["note"] = "no dropout in the model: the seeds draw the initialisation"
    return row


def _float64(ours, theirs, exact) -> dict:
    """Largest loss gaps to the reference's float64 run: ptm's, the reference's own float32 run's."""
    import trajectory

    return {"loss_gap_to_float64": trajectory.loss_gap(ours, exact),
            "reference_float32_gap_to_float64": trajectory.loss_gap(theirs, exact)}


def _float64_params(ours, theirs, exact) -> dict:
    """Largest final-parameter gaps to the reference's float64 run: ptm's, the reference's own float32 run's."""
    import trajectory

    return {"param_gap_to_float64": trajectory.param_gap(ours, exact),
            "reference_float32_param_gap_to_float64": trajectory.param_gap(theirs, exact)}


def _log(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} cpu {time.process_time():.0f}s] {what}", file=sys.stderr, flush=True)


def _seed_ranges(ptm_losses, ref_losses, last: int = 50) -> dict:
    import numpy as np

    ours = [float(np.mean(x[-last:])) for x in ptm_losses]
    theirs = [float(np.mean(x[-last:])) for x in ref_losses]
    mean = float(np.mean(ours))
    return {"ptm": ours, "reference": theirs, "ptm_mean": mean,
            "inside": min(theirs) <= mean <= max(theirs)}


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax

    import machine_info
    import reference_libs
    from ptm_jax.config import MeshConfig
    from ptm_jax.parallel.mesh import make_mesh

    for lib in ("fastai", "allennlp"):
        if not reference_libs.use(lib):
            raise SystemExit(reference_libs.missing(lib))
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    results = {"machine": machine_info.describe(torch_too=True), "args": vars(args), "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("".join(DATA.read_text(encoding="utf-8").splitlines(True)[:args.lines]), encoding="utf-8")
        for name in args.objectives.split(","):
            start = time.perf_counter()
            row = {"ulmfit": ulmfit, "elmo": elmo, "nnlm": nnlm}[name](Path(tmp) / name, corpus, args, mesh)
            row["seconds"] = round(time.perf_counter() - start, 1)
            results["rows"].append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(machine_info.one_line(results["machine"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
