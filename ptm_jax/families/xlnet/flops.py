"""Analytic FLOPs of an XLNet permutation-LM step (``Bench.flops``; conventions in ``ptm_jax/bench/flops.py``).

XLNet (Yang et al. 2019, Sec. 2.3; zihangdai/xlnet modeling.py ``two_stream_rel_attn``) as
``families/xlnet/model.py`` and ``two_stream.py`` run it: batch B, length L, memory M (``model.mem_len``),
keys K = M + L, relative encodings R = K + L, hidden H, FFN I, layers n, vocabulary V, P targets per
sequence. Forward MACs per layer:

- projections: k and v over ``[mem; h]`` ``2 B K H^2``; q and o of the content stream ``2 B L H^2`` and of
  the query stream ``2 B P H^2``; r over the R relative encodings ``E R H^2``, where E = B when the
  encodings are per example (dropout on them in training, or ``bi_data``), else 1;
- each stream's scores at the L positions (the query stream is scattered onto its targets' positions with
  ``target_mapping`` first, ``B P L H``, and gathered back after, ``B P L H``): content ``q k^T`` and the
  weighted sum of v ``2 B L K H``, position ``q r^T`` ``B L R H`` (before ``rel_shift``), segment
  ``q seg_embed^T`` against the two segment embeddings ``2 B L H``;
- FFN on both streams with shared weights ``2 B (L + P) H I``.

The PLM loss reads only the query stream, so the content stream of the last layer (its q and o
projections, scores and FFN) is dead code that XLA removes: it is not counted (n - 1 content-stream
layers, n query-stream layers; k, v and r run in all n). A scanned stack runs it anyway: that is
hardware FLOPs (``StepFlops.recompute``), not model FLOPs. Last, the tied LM head at the P targets,
``B P H V``.

Train FLOPs are 3 x forward except for matmuls with one operand that takes no gradient: the r projection
(the sinusoid encodings are constants) and the two ``target_mapping`` einsums (data) run their forward and
one gradient matmul only, 2 x forward (``StepFlops.one_gradient``).
XLA's dot count of the compiled step equals this exactly (tests/test_flops.py).
"""
from __future__ import annotations

from typing import Any

from ptm_jax.bench.flops import StepFlops


def _encoding_rows(cfg: Any) -> int:
    """Rows of relative encodings the r projection sees in a train step (``XLNetModel.__call__``)."""
    per_example = cfg.data.bi_data or cfg.model.hidden_dropout > 0.0
    return cfg.train.batch_size if per_example else 1


def _terms(cfg: Any, content: int, query: int, shared: int, head: bool) -> dict[str, float]:
    """Forward FLOPs of ``content`` content-stream layers, ``query`` query-stream layers, the k/v/r
    projections of ``shared`` layers and (``head``) the LM head."""
    m = cfg.model
    B, L, P = cfg.train.batch_size, cfg.data.max_seq_length, cfg.data.max_predictions_per_seq
    H, I, V = m.hidden_size, m.intermediate_size, m.vocab_size
    K = m.mem_len + L
    R = K + L
    E = _encoding_rows(cfg)
    macs = {
        "attention_projections": shared * 2 * B * K * H * H + content * 2 * B * L * H * H + query * 2 * B * P * H * H,
        "relative_projection": shared * E * R * H * H,
        # per stream and layer: content scores + weighted values, position scores, segment scores
        "attention_scores": (content + query) * (2 * B * L * K * H + B * L * R * H + 2 * B * L * H),
        "target_mapping": query * 2 * B * P * L * H,
        "ffn": 2 * B * (content * L + query * P) * H * I,
        "lm_head": B * P * H * V if head else 0,
    }
    return {k: 2.0 * v for k, v in macs.items()}


def forward_flops(cfg: Any) -> dict[str, float]:
    """Forward matmul FLOPs of XLNetLMHeadModel on one global PLM batch, by component (module docstring):
    n - 1 content-stream layers (the last one feeds nothing), n query-stream layers."""
    n = cfg.model.num_layers
    return _terms(cfg, n - 1, n, n, head=True)


ONE_GRADIENT = ("relative_projection", "target_mapping")
"""Components whose one operand is a constant or data: forward plus one gradient matmul."""
_LAYER = ("attention_projections", "relative_projection", "attention_scores", "target_mapping", "ffn")


def step_flops(cfg: Any) -> StepFlops:
    fwd = forward_flops(cfg)
    return StepFlops(forward=fwd, recompute=_extra(cfg, fwd), tokens=cfg.train.batch_size * cfg.data.max_seq_length,
                     one_gradient=ONE_GRADIENT)


def _extra(cfg: Any, fwd: dict[str, float]) -> float:
    """Hardware FLOPs beyond the model FLOPs. ``model.remat`` re-runs forward matmuls in the backward pass:
    the whole layer (full) or its batched attention matmuls (save_dots; projections and FFN are saved).
    A scanned stack (``model.scan_layers``) runs the same body in every layer, so the last layer's unused
    content stream is computed anyway: forward, both gradients, and its share of the recomputation."""
    dead = _terms(cfg, 1, 0, 0, head=False) if cfg.model.scan_layers else {k: 0.0 for k in fwd}
    extra = 3.0 * sum(dead.values())
    if cfg.model.remat == "full":
        extra += sum(fwd[k] + dead[k] for k in _LAYER)
    elif cfg.model.remat == "save_dots":
        extra += fwd["attention_scores"] + dead["attention_scores"] + fwd["target_mapping"]
    return extra
