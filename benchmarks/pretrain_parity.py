"""Pretraining trains like the reference, step by step: ptm_jax's Transformer pretraining objectives against
transformers' models, from the same parameters on the same batches with the same optimizer.

Objectives and references (transformers 4.57, PyTorch):
  bert   MLM + NSP (``mlm_nsp``)                         BertForPreTraining
  ernie  ERNIE 1.0's knowledge-masked MLM (``ernie_mlm``) ErnieForMaskedLM (the same network as BERT's MLM)
  gpt1   causal LM, post-LN (the ``gpt1`` preset)         OpenAIGPTLMHeadModel
  gpt2   causal LM, pre-LN (``gpt_tiny``)                  GPT2LMHeadModel
  xlnet  two-stream permutation LM (``plm``)              XLNetLMHeadModel, fed ptm's perm_mask and target_mapping
  xlnet_bi  the same with ``data.bi_data`` (the pod presets': half of each batch is the reversed stream, with
         backward relative positions), transformers' ``bi_data`` set for training

The protocol of each run:
* Parameters: ptm_jax initialises the model (``compile_objective``'s init), saves it as a params directory and
  exports it with the family's own Hugging Face exporter (``Interop.hf.export_dir``, what ``ptm export`` runs);
  transformers loads that folder. At the end transformers' trained model is saved and read back by the project's
  importer (``export.params.load_params``) and compared with ptm_jax's, tensor by tensor.
* Batches: ptm_jax's own stream (``objective.train_batches`` over the tokenizer and token cache ``ptm pretrain``
  builds from ``--corpus``) is written to ``batches.npz``; both sides read the batches from that file. What each
  reference is fed: BERT / ERNIE: ids, attention mask, token types and MLM labels (-100 off the masked positions;
  NSP labels for BERT), the model's own loss. GPT-2: the packed rows as they are, with the block-diagonal causal
  mask of the rows' documents (a 4-D additive mask, which transformers takes as given) and the stream's position
  ids. GPT-1 (OpenAIGPT takes no 4-D mask): each document piece of a packed row as its own row, with its position
  ids. The stream's targets cross document ends (an end-of-text token predicts the next document's first token),
  so the causal-LM loss is torch's ``cross_entropy`` of the logits at ptm_jax's ``target_ids`` (-100 where the
  weight is 0), mean over targets. XLNet: ids, token types, ``perm_mask``, ``target_mapping`` and labels, the
  model's own loss, and Transformer-XL memory carried from step to step (``mems``: zeros at step 0, as ptm_jax's
  ``init_carry``, then each step's ``mems`` output; ``reuse_len`` set from ``data.reuse_len``).
* Optimizer: the preset's, reproduced with torch's pieces: ``torch.optim.AdamW`` where ptm_jax's AdamW has bias
  correction (GPT); BERT's AdamW without bias correction (google-research/bert optimization.py), which torch does not
  offer, is written below (``AdamWNoBiasCorrection``, 15 lines). Weight decay on the parameters transformers'
  Trainer decays (``Trainer.get_decay_parameter_names``: not LayerNorms, not biases), and for XLNet also on the
  relative-attention biases r_w/r_r/r_s (zihangdai/xlnet model_utils.py ``include_in_weight_decay``); ptm_jax's own
  decay mask, exported through the same exporter, must name the same tensors (``decay_sets_equal``). Clipping:
  ``torch.nn.utils.clip_grad_norm_``. Schedule: ``transformers.get_linear_schedule_with_warmup`` for
  ``train.lr_decay = from_peak``; BERT's decay counted from step 0 (``lr_decay = bert``) has no transformers
  piece: ``torch.optim.lr_scheduler.LambdaLR`` with that line.
* Embeddings: transformers' ``padding_idx`` (BERT, ERNIE: the [PAD] row takes no gradient from its lookups) is
  cleared, as google-research/bert's lookup has none: masking's random replacement can put [PAD] at an attended
  position (``without_padding_idx``).
* Dropout off for the parity run; ``--dropout-seeds`` runs each side again with the preset's dropout, once per
  seed (ptm_jax: the dropout key; torch: ``torch.manual_seed``), same parameters and batches, and compares the mean
  loss of the last 50 steps.

    python benchmarks/pretrain_parity.py --objective all --steps 300 --out runs/pretrain_parity.json

Printed per objective: the largest per-step loss gap, the largest gap of the gradient norm, the final largest
parameter gap, and the dropout-on means. Tests (tests/test_pretrain_parity.py) run the same code at a tiny shape.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (REPO, REPO / "tests", HERE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))
os.environ.setdefault("USE_TF", "0")  # transformers' Trainer would import TensorFlow's Keras otherwise
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "corpus" / "tinyshakespeare" / "input.txt"
TINY_GPT1 = ["model.vocab_size=1000", "tokenizer.vocab_size=1000", "model.hidden_size=32", "model.num_layers=2",
             "model.num_heads=2", "model.intermediate_size=128", "model.max_position_embeddings=64",
             "data.max_seq_length=64", "train.batch_size=16", "train.log_every=5", "train.progress_bar=false"]
"""The gpt1 preset at gpt_tiny's shape (every optimizer setting stays GPT-1's)."""


@dataclasses.dataclass(frozen=True)
class Case:
    preset: str
    reference: str
    """The transformers class."""
    overrides: tuple[str, ...] = ()


CASES = {
    "bert": Case("bert_tiny", "BertForPreTraining"),
    "ernie": Case("ernie_tiny", "ErnieForMaskedLM"),
    "gpt1": Case("gpt1", "OpenAIGPTLMHeadModel", tuple(TINY_GPT1)),
    "gpt2": Case("gpt_tiny", "GPT2LMHeadModel"),
    "xlnet": Case("xlnet_tiny", "XLNetLMHeadModel"),
    "xlnet_bi": Case("xlnet_tiny", "XLNetLMHeadModel", ("data.bi_data=true",)),
}
SHAPES = {
    "tiny": [],  # the tiny presets: hidden 32, 2 layers, length 64 (XLNet 32), batch 16 (XLNet 8), vocab 1000
    "small": ["model.hidden_size=64", "model.num_heads=4", "model.intermediate_size=256"],
}


def config(name: str, steps: int, corpus: Path, work: Path, shape: str = "tiny", dropout: bool = False,
           overrides: tuple[str, ...] = ()):
    """The run config of one objective: its preset at ``shape``, ``steps`` steps with 10% warmup, ``corpus``, then
    ``overrides``."""
    from ptm_jax.config_loading import load_config

    case = CASES[name]
    no_dropout = [] if dropout else ["model.hidden_dropout=0.0", "model.attention_dropout=0.0"]
    return load_config(case.preset, [*case.overrides, *SHAPES[shape], *no_dropout, f"data.corpus={corpus}",
                                     f"output_dir={work / name}", "data.eval_documents=0", f"train.steps={steps}",
                                     f"train.warmup_steps={max(1, steps // 10)}", *overrides])


# ----------------------------------------------------------------------------------------------- ptm_jax's side
@dataclasses.dataclass
class PtmSide:
    cfg: Any
    objective: Any
    compiled: Any
    mesh: Any
    groups: Any
    initial: dict
    """The initial parameters ({'params': ...}, numpy)."""
    hf_dir: Path
    """Those parameters exported to the reference's layout."""
    batches: list[dict]
    decay_names: set[str]
    """The exported tensors ptm_jax's optimizer decays."""


def ptm_side(cfg, steps: int, work: Path, mesh=None) -> PtmSide:
    """Builds the stream, the objective and its compiled step; exports the initial parameters and writes the
    batches to ``work/batches.npz``, read back from there."""
    import jax
    from step_losses import initial_state

    from ptm_jax.families import registry
    from ptm_jax.objectives.registry import build_objective
    from ptm_jax.parallel.mesh import make_mesh
    from ptm_jax.train.stages import prepare_corpus, pretrain_param_groups

    work.mkdir(parents=True, exist_ok=True)
    objective = build_objective(cfg, prepare_corpus(cfg))
    mesh = mesh if mesh is not None else make_mesh(cfg.mesh)
    groups = pretrain_param_groups(cfg)
    compiled, state = initial_state(objective, cfg.train, mesh, groups)
    initial = jax.tree.map(np.asarray, jax.device_get(state.params))
    hf_dir = export(cfg, initial["params"], work / "init")
    decay = export(cfg, decay_tree(cfg, initial["params"], groups), work / "decay_mask")
    decay_names = {k for k, v in read_tensors(decay).items() if np.all(v == 1.0)}
    stream = objective.train_batches(0, cfg.train.batch_size, 0, 1)
    try:
        batches = [next(stream) for _ in range(steps)]
    finally:
        getattr(stream, "close", lambda: None)()
    keys = list(compiled.batch_keys)
    np.savez(work / "batches.npz", **{k: np.stack([b[k] for b in batches]) for k in keys})
    with np.load(work / "batches.npz") as f:
        stacked = {k: f[k] for k in keys}
    batches = [{k: v[i] for k, v in stacked.items()} for i in range(steps)]
    assert registry.get(cfg.model.family).interop.hf is not None
    return PtmSide(cfg, objective, compiled, mesh, groups, initial, hf_dir, batches, decay_names)


def export(cfg, params: dict, out: Path) -> Path:
    """``params`` -> a params directory -> the family's Hugging Face exporter (``ptm export``'s path)."""
    from ptm_jax.export import params as params_lib
    from ptm_jax.families import registry

    tok_dir = Path(cfg.output_dir) / "tokenizer"
    files = sorted(f for f in tok_dir.iterdir() if f.name != "settings.json" and f.suffix != ".vocab")
    kind = cfg.tokenizer.kind if cfg.tokenizer.kind in ("wordpiece", "byte_bpe") else "sentencepiece"
    fam = registry.get(cfg.model.family)
    shutil.rmtree(out, ignore_errors=True)
    src = params_lib.save_params(out / "params", params, cfg.model, fam.layout.infer_head(params),
                                 {"tokenizer": {"kind": kind, "lower_case": cfg.tokenizer.lower_case}}, files)
    fam.interop.hf.export_dir(src, out / "hf")
    return out / "hf"


def decay_tree(cfg, params: dict, groups) -> dict:
    """ptm_jax's weight-decay multiplier of every parameter, as a tree of parameter-shaped arrays."""
    import jax

    from ptm_jax.train import param_groups as pg

    rules = [*(pg.DEFAULT_RULES if groups is None else groups),
             *pg.rules_from_config(cfg.train.param_groups, "train.param_groups")]
    mults = pg.multipliers(rules, {"params": params}, "weight_decay")["params"]
    return jax.tree.map(lambda m, p: np.full(np.shape(p), float(m), np.float32), mults, params)


def read_tensors(hf_dir: Path) -> dict[str, np.ndarray]:
    from ptm_jax.export.hf_files import read_hf_dir

    return read_hf_dir(hf_dir)[1]


def run_ptm(side: PtmSide, dropout_key: int = 0) -> tuple[np.ndarray, dict]:
    """([steps, 2] loss and gradient norm per step, final params) from the initial parameters."""
    import jax
    from step_losses import run_steps

    state = side.compiled.init_fn(jax.random.key(7))  # the same parameters again (the step donates the state)
    out, state = run_steps(side.compiled, state, side.batches, side.mesh, len(side.batches), dropout_key)
    return out, jax.tree.map(np.asarray, jax.device_get(state.params))["params"]


# ----------------------------------------------------------------------------------------------- the reference
XLNET_DECAYED_BIASES = ("r_s_bias", "r_r_bias", "r_w_bias")


class AdamWNoBiasCorrection:
    """google-research/bert optimization.py AdamWeightDecayOptimizer on torch tensors: m = b1 m + (1 - b1) g,
    v = b2 v + (1 - b2) g^2, p -= lr (m / (sqrt(v) + eps) + wd p); no bias correction (torch has no such switch)."""

    def __new__(cls, groups, lr, betas, eps):
        import torch

        class _Opt(torch.optim.Optimizer):
            def __init__(self):
                super().__init__(groups, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0})

            @torch.no_grad()
            def step(self):
                for g in self.param_groups:
                    (b1, b2), eps_, wd, lr_ = g["betas"], g["eps"], g["weight_decay"], g["lr"]
                    for p in g["params"]:
                        st = self.state[p]
                        if not st:
                            st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                        st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                        st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                        update = st["m"] / (st["v"].sqrt() + eps_)
                        if wd:
                            update += wd * p
                        p.add_(update, alpha=-lr_)

        return _Opt()


def reference_optimizer(model, tcfg, family: str):
    """ptm_jax's optimizer with torch's and transformers' pieces (module docstring); also the decayed names."""
    import torch
    import transformers
    from transformers import Trainer

    names = set(Trainer.get_decay_parameter_names(None, model))
    if family == "xlnet":  # zihangdai/xlnet model_utils.py include_in_weight_decay
        names |= {n for n, _ in model.named_parameters() if n.rsplit(".", 1)[-1] in XLNET_DECAYED_BIASES}
    params = dict(model.named_parameters())
    groups = [{"params": [p for n, p in params.items() if n in names], "weight_decay": tcfg.weight_decay},
              {"params": [p for n, p in params.items() if n not in names], "weight_decay": 0.0}]
    betas = (tcfg.adam_b1, tcfg.adam_b2)
    if tcfg.optimizer != "adamw":
        raise SystemExit(f"train.optimizer={tcfg.optimizer!r}: only adamw is reproduced here")
    opt = (torch.optim.AdamW(groups, lr=tcfg.learning_rate, betas=betas, eps=tcfg.adam_eps)
           if tcfg.adam_bias_correction else AdamWNoBiasCorrection(groups, tcfg.learning_rate, betas, tcfg.adam_eps))
    if tcfg.lr_decay == "from_peak":
        sched = transformers.get_linear_schedule_with_warmup(opt, tcfg.warmup_steps, tcfg.steps)
    elif tcfg.lr_decay == "bert":
        w, t = tcfg.warmup_steps, tcfg.steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: k / max(w, 1) if k < w else max(0.0, 1 - k / t))
    else:
        raise SystemExit(f"train.lr_decay={tcfg.lr_decay!r} is not reproduced here")
    return opt, sched, names


def masked_labels(ids: np.ndarray, weights: np.ndarray):
    import torch

    return torch.tensor(np.where(weights > 0, ids, -100), dtype=torch.long)


def forward_bert(model, b: dict, state: dict):
    import torch

    t = {k: torch.tensor(v, dtype=torch.long) for k, v in b.items() if k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.full(b["input_ids"].shape, -100, np.int64)
    rows, cols = np.nonzero(b["masked_lm_weights"] > 0)
    labels[rows, b["masked_lm_positions"][rows, cols]] = b["masked_lm_ids"][rows, cols]
    extra = {"next_sentence_label": torch.tensor(b["next_sentence_labels"].reshape(-1), dtype=torch.long)} \
        if "next_sentence_labels" in b and state["nsp"] else {}
    return model(input_ids=t["input_ids"], attention_mask=t["input_mask"], token_type_ids=t["segment_ids"],
                 labels=torch.tensor(labels), **extra).loss


def lm_loss(logits, labels):
    import torch

    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100)


def forward_gpt2(model, b: dict, state: dict):
    """The packed rows as they are: key j is visible to query i iff j <= i in the same document."""
    import torch

    seg = b["segment_ids"]
    n = seg.shape[1]
    visible = (seg[:, :, None] == seg[:, None, :]) & (np.arange(n)[None, :] <= np.arange(n)[:, None])[None]
    mask = torch.tensor(np.where(visible, 0.0, np.finfo(np.float32).min)[:, None], dtype=torch.float32)
    logits = model(input_ids=torch.tensor(b["input_ids"], dtype=torch.long), attention_mask=mask,
                   position_ids=torch.tensor(b["position_ids"], dtype=torch.long)).logits
    return lm_loss(logits, masked_labels(b["target_ids"], b["target_weights"]))


def forward_gpt1(model, b: dict, state: dict):
    """Each document piece of a packed row as its own row (right-padded), with the stream's positions."""
    import torch

    pieces = []
    for r in range(b["input_ids"].shape[0]):
        seg = b["segment_ids"][r]
        for s in np.unique(seg[seg > 0]):
            idx = np.nonzero(seg == s)[0]
            pieces.append((b["input_ids"][r, idx], b["position_ids"][r, idx], b["target_ids"][r, idx],
                           b["target_weights"][r, idx]))
    width = max(len(p[0]) for p in pieces)
    ids, pos, am = (np.zeros((len(pieces), width), np.int64) for _ in range(3))
    labels = np.full((len(pieces), width), -100, np.int64)
    for i, (x, p, y, w) in enumerate(pieces):
        ids[i, :len(x)], pos[i, :len(x)], am[i, :len(x)] = x, p, 1
        labels[i, :len(x)] = np.where(w > 0, y, -100)
    logits = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(am, dtype=torch.float32),
                   position_ids=torch.tensor(pos)).logits
    return lm_loss(logits, torch.tensor(labels))


def forward_xlnet(model, b: dict, state: dict):
    import torch

    out = model(input_ids=torch.tensor(b["input_ids"], dtype=torch.long),
                token_type_ids=torch.tensor(b["segment_ids"], dtype=torch.long),
                perm_mask=torch.tensor(b["perm_mask"]), target_mapping=torch.tensor(b["target_mapping"]),
                labels=masked_labels(b["target_ids"], b["target_weights"]), mems=state.get("mems"),
                use_mems=state.get("mems") is not None)
    if state.get("mems") is not None:
        state["mems"] = [m.detach() for m in out.mems]
    return out.loss


FORWARD: dict[str, Callable] = {"bert": forward_bert, "ernie": forward_bert, "gpt1": forward_gpt1,
                                "gpt2": forward_gpt2, "xlnet": forward_xlnet, "xlnet_bi": forward_xlnet}


def run_reference(name: str, side: PtmSide, seed: int = 0, threads: int = 1, ulp: bool = False
                  ) -> tuple[np.ndarray, dict, set]:
    """transformers' model trained on the written batches: ([steps, 2] loss and gradient norm, final params read
    back by the project's importer, the decayed parameter names). ``ulp``: every initial parameter moved by one unit
    in the last place, up or down at random (the control: how far rounding noise alone carries a run)."""
    import torch
    import transformers

    from ptm_jax.export import params as params_lib

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    cfg = side.cfg
    extra = {"reuse_len": cfg.data.reuse_len, "bi_data": cfg.data.bi_data} if cfg.model.family == "xlnet" else {}
    model = getattr(transformers, CASES[name].reference).from_pretrained(side.hf_dir, attn_implementation="eager",
                                                                        **extra)
    without_padding_idx(model)
    torch.manual_seed(seed)
    if ulp:
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.where(torch.rand_like(p) < 0.5, torch.nextafter(p, p + 1), torch.nextafter(p, p - 1)))
    model.train()
    opt, sched, decayed = reference_optimizer(model, cfg.train, cfg.model.family)
    state: dict[str, Any] = {"nsp": cfg.objective == "mlm_nsp"}
    if cfg.model.family == "xlnet" and cfg.model.mem_len > 0:
        b0 = side.batches[0]["input_ids"].shape[0]
        state["mems"] = [torch.zeros(cfg.model.mem_len, b0, cfg.model.hidden_size) for _ in range(cfg.model.num_layers)]
    out = []
    for batch in side.batches:
        loss = FORWARD[name](model, batch, state)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip_norm if cfg.train.clip_norm > 0
                                              else float("inf"))
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        out.append([float(loss.detach()), float(norm)])
    trained = Path(side.hf_dir).parent.parent / f"reference_trained_{seed}_{threads}{'_ulp' if ulp else ''}"
    shutil.rmtree(trained, ignore_errors=True)
    model.save_pretrained(trained)
    for f in ("vocab.txt", "vocab.json", "merges.txt", "spm.model", "tokenizer_config.json"):
        if (Path(side.hf_dir) / f).is_file():
            shutil.copy(Path(side.hf_dir) / f, trained / f)
    params, _, _, _ = params_lib.load_params(trained)
    return np.array(out), params, decayed


def without_padding_idx(model) -> list[str]:
    """Clears ``padding_idx`` of the model's embeddings (transformers builds BERT's and ERNIE's word embeddings with
    ``padding_idx=pad_token_id``); returns the names of those it cleared. torch's ``padding_idx`` drops the
    gradient of that row's lookups; google-research/bert's lookup (``tf.gather``) and ptm_jax's keep it. The two
    agree on real padding (masked keys pass no gradient back), but not where [PAD] is an attended input: BERT's
    masking replaces 10% of the chosen positions with a token drawn from the whole vocabulary, [PAD] included (at
    the tiny shape the first such draw comes at step 35). Kept, the [PAD] row of the reference stopped training
    at those lookups only (the word-embedding gap of 0.018 after 300 steps; every other row within 2e-7 after 60)."""
    import torch

    cleared = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
            m.padding_idx = None
            cleared.append(name)
    return cleared


# ----------------------------------------------------------------------------------------------- comparison
def param_gap(ours: dict, theirs: dict) -> dict:
    """Largest |ptm - reference| over the tensors both hold (ptm_jax's tensors the reference class has no place
    for, e.g. the pooler of a masked-LM-only model, listed apart)."""
    from ptm_jax.export import params as params_lib

    a, b = params_lib.flatten(ours), params_lib.flatten(theirs)
    common = sorted(a.keys() & b.keys())
    gaps = {k: float(np.max(np.abs(np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64)))) for k in common}
    worst = max(gaps, key=gaps.get)
    scale = max(float(np.max(np.abs(a[k]))) for k in common)
    return {"max_param_gap": gaps[worst], "param_of_max_gap": worst, "largest_param": scale,
            "tensors_compared": len(common), "only_in_ptm": sorted(a.keys() - b.keys()),
            "only_in_reference": sorted(b.keys() - a.keys())}


def curve_gaps(ptm: np.ndarray, ref: np.ndarray) -> dict:
    from bench_minilm_sst2 import loss_gaps

    out = loss_gaps(list(map(float, ref[:, 0])), list(map(float, ptm[:, 0])))
    g = np.abs(ptm[:, 1] - ref[:, 1])
    out.update(max_grad_norm_gap=float(f"{g.max():.3e}"), max_grad_norm_rel_gap=float(f"{(g / ref[:, 1]).max():.3e}"),
               first_loss=round(float(ref[0, 0]), 5), last_loss=round(float(ref[-1, 0]), 5))
    return out


def parity(name: str, steps: int, corpus: Path, work: Path, shape: str = "tiny", mesh=None, threads: int = 1,
           control: str = "", overrides: tuple[str, ...] = ()) -> dict:
    """Dropout off: both sides from the same parameters on the same batches; per-step and parameter gaps.
    ``control``: the reference once more, started one rounding error away (``ulp``: every initial parameter one
    unit in the last place up or down) or on 2 threads (``threads``: another summation order); its gaps to the first
    reference run are what rounding noise alone grows to: the floor of what two correct implementations agree on."""
    cfg = config(name, steps, corpus, work, shape, overrides=overrides)
    side = ptm_side(cfg, steps, work / name, mesh)
    t0 = time.perf_counter()
    ptm, ptm_params = run_ptm(side)
    t1 = time.perf_counter()
    ref, ref_params, decayed = run_reference(name, side, threads=threads)
    t2 = time.perf_counter()
    floor = {}
    if control:
        ref2, ref2_params, _ = run_reference(name, side, threads=2 if control == "threads" else threads,
                                             ulp=control == "ulp")
        floor = {"reference_vs_reference": {"control": control, **curve_gaps(ref2, ref),
                                            **param_gap(ref2_params, ref_params)}}
    exported = set(read_tensors(side.hf_dir))
    ref_decayed = {n for n in decayed if n in exported}
    return {"objective": cfg.objective, "reference": f"transformers {CASES[name].reference}",
            "preset": CASES[name].preset,
            "shape": shape_of(cfg), "steps": steps, **curve_gaps(ptm, ref), **param_gap(ptm_params, ref_params),
            "max_param_change": param_gap(ptm_params, side.initial["params"])["max_param_gap"],
            "decay_sets_equal": ref_decayed == side.decay_names,
            "decayed_only_by_ptm": sorted(side.decay_names - ref_decayed),
            "decayed_only_by_reference": sorted(ref_decayed - side.decay_names),
            "optimizer": optimizer_of(cfg.train), "seconds": {"ptm": round(t1 - t0, 1), "reference": round(t2 - t1, 1)},
            **floor, "curves": {"ptm": ptm.tolist(), "reference": ref.tolist()}}


def dropout_runs(name: str, steps: int, corpus: Path, work: Path, seeds: list[int], shape: str = "tiny",
                 mesh=None, threads: int = 1, last: int = 50, overrides: tuple[str, ...] = ()) -> dict:
    """The preset's dropout on both sides, one run per seed; the mean loss of the last ``last`` steps of each."""
    cfg = config(name, steps, corpus, work / "dropout", shape, dropout=True, overrides=overrides)
    side = ptm_side(cfg, steps, work / "dropout" / name, mesh)
    ptm = [float(np.mean(run_ptm(side, s)[0][-last:, 0])) for s in seeds]
    ref = [float(np.mean(run_reference(name, side, s, threads)[0][-last:, 0])) for s in seeds]
    mean = float(np.mean(ptm))
    return {"dropout": cfg.model.hidden_dropout, "seeds": seeds, "last_steps": last, "ptm_means": ptm,
            "reference_means": ref, "ptm_mean": mean, "reference_range": [min(ref), max(ref)],
            "ptm_mean_inside_reference_range": min(ref) <= mean <= max(ref),
            "ptm_seeds_inside_reference_range": sum(min(ref) <= m <= max(ref) for m in ptm)}


def shape_of(cfg) -> str:
    m, d, t = cfg.model, cfg.data, cfg.train
    return (f"{m.num_layers}x{m.hidden_size} ({m.num_heads} heads, FFN {m.intermediate_size}), vocab {m.vocab_size}, "
            f"length {d.max_seq_length}, batch {t.batch_size}")


def optimizer_of(t) -> str:
    return (f"AdamW {'with' if t.adam_bias_correction else 'without'} bias correction, lr {t.learning_rate:g}, "
            f"warmup {t.warmup_steps}, decay {t.lr_decay}, weight decay {t.weight_decay:g}, eps {t.adam_eps:g}, "
            f"clip {t.clip_norm:g}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objective", default="all", help=f"all, or a comma-separated list of {', '.join(CASES)}")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--shape", default="tiny", choices=list(SHAPES))
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--dropout-seeds", default="0,1,2", help="comma-separated; empty: no dropout-on runs")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both sides (after the shape's), e.g. train.weight_decay=0")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--control", default="", choices=["", "ulp", "threads"],
                    help="run the reference again from parameters one ulp away (ulp) or on 2 threads (threads): the "
                         "reference-vs-reference gaps, the floor set by rounding noise")
    ap.add_argument("--work", default="", help="scratch folder (default: a temporary one)")
    ap.add_argument("--out", default="", help="write the results as JSON here too")
    args = ap.parse_args(argv)
    import tempfile

    import machine_info

    work = Path(args.work or tempfile.mkdtemp(prefix="pretrain_parity_"))
    names = list(CASES) if args.objective == "all" else args.objective.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"--objective: {', '.join(unknown)} unknown; choose from all, {', '.join(CASES)}")
    seeds = [int(s) for s in args.dropout_seeds.split(",") if s.strip()]
    results: dict[str, Any] = {"load_average_before": [round(x, 2) for x in os.getloadavg()]}
    for name in names:
        r = parity(name, args.steps, Path(args.corpus), work, args.shape, threads=args.threads,
                   control=args.control, overrides=tuple(args.set))
        if seeds:
            r["dropout_on"] = dropout_runs(name, args.steps, Path(args.corpus), work, seeds, args.shape,
                                           threads=args.threads, overrides=tuple(args.set))
        results[name] = r
        print(json.dumps({name: {k: v for k, v in r.items() if k != "curves"}}, indent=2), flush=True)
    results["machine"] = machine_info.describe(torch_too=True)
    results["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(machine_info.one_line(results["machine"]), file=sys.stderr)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
