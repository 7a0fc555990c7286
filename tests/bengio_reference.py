"""The reference side of NNLM's trajectory parity: Bengio, Ducharme, Vincent and Jauvin 2003 (JMLR 3, "A Neural
Probabilistic Language Model", Sec. 2) written here in PyTorch from the paper, not from ptm's model.

    x = (C(w_{t-1}), C(w_{t-2}), ..., C(w_{t-n+1}))      the features of the n-1 previous words, most recent first
    y = b + W x + U tanh(d + H x)                         (W: the optional direct connections)
    P(w_t | w_{t-n+1}, ..., w_{t-1}) = softmax(y)_{w_t}

C is an ``nn.Embedding``, (H, d) and (U, b) are ``nn.Linear`` layers, W a bias-free ``nn.Linear``. Each
prediction is one row of contexts built from ptm's windows (a window of L + n - 1 running tokens predicts its
last L, each from the n - 1 tokens before it); the loss is the mean cross-entropy over the batch's predictions.
Training uses torch's own pieces: ``torch.optim.Adam`` whose ``weight_decay`` is the L2 term added to the gradient
(ptm's ``adam``), on C, H, U and W but not on the biases b and d (the paper: "the weight decay penalty ... applied
only to the weights of the neural network and to the C matrix, not to the biases"), ``clip_grad_norm_``, and
``LambdaLR`` with linear warmup then a linear decay to 0 at the last step.

The parameter mapping to and from ptm's tree (ptm has no export of an NNLM to another framework):
``nnlm/embedding`` = C; ``nnlm/hidden`` kernel = H^T, bias = d; ``lm_head/output`` kernel = U^T, bias = b;
``lm_head/direct`` kernel = W^T."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch


class BengioNnlm(torch.nn.Module):
    def __init__(self, vocab_size: int, order: int, embed_dim: int, hidden_dim: int, direct: bool):
        super().__init__()
        assert hidden_dim > 0, "the reference has the hidden layer"
        context = (order - 1) * embed_dim
        self.C = torch.nn.Embedding(vocab_size, embed_dim)
        self.H = torch.nn.Linear(context, hidden_dim)
        self.U = torch.nn.Linear(hidden_dim, vocab_size)
        self.W = torch.nn.Linear(context, vocab_size, bias=False) if direct else None

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        """context [N, n-1] word ids, most recent first -> y [N, |V|]."""
        x = self.C(context).flatten(1)
        y = self.U(torch.tanh(self.H(x)))
        return y + self.W(x) if self.W is not None else y


def build(model_cfg: Any) -> BengioNnlm:
    m = model_cfg
    return BengioNnlm(m.vocab_size, m.order, m.embed_dim, m.hidden_dim, m.direct)


def init_as_ptm_states(model: BengioNnlm, std: float, seed: int) -> None:
    """The initialisation ptm's NNLM states (``init_std``): the weights and C from a normal truncated at 2
    standard deviations, the biases 0; drawn by torch."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            else:
                torch.nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std, generator=g)


def load_ptm(model: BengioNnlm, params: dict) -> None:
    t = lambda a: torch.from_numpy(np.array(a, np.float32))
    with torch.no_grad():
        model.C.weight.copy_(t(params["nnlm"]["embedding"]))
        model.H.weight.copy_(t(params["nnlm"]["hidden"]["kernel"]).T)
        model.H.bias.copy_(t(params["nnlm"]["hidden"]["bias"]))
        model.U.weight.copy_(t(params["lm_head"]["output"]["kernel"]).T)
        model.U.bias.copy_(t(params["lm_head"]["output"]["bias"]))
        if model.W is not None:
            model.W.weight.copy_(t(params["lm_head"]["direct"]["kernel"]).T)


def as_ptm(model: BengioNnlm) -> dict:
    n = lambda p: p.detach().numpy().copy()
    head = {"output": {"kernel": n(model.U.weight).T, "bias": n(model.U.bias)}}
    if model.W is not None:
        head["direct"] = {"kernel": n(model.W.weight).T}
    return {"nnlm": {"embedding": n(model.C.weight), "hidden": {"kernel": n(model.H.weight).T,
                                                                "bias": n(model.H.bias)}}, "lm_head": head}


def contexts(window_ids: np.ndarray, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows [B, L + n - 1] -> (contexts [B * L, n - 1] most recent first, targets [B * L])."""
    c = order - 1
    length = window_ids.shape[1] - c
    positions = c + np.arange(length)                                   # the predicted positions
    before = positions[:, None] - 1 - np.arange(c)[None, :]             # w_{t-1}, w_{t-2}, ..., w_{t-n+1}
    return window_ids[:, before].reshape(-1, c), window_ids[:, positions].reshape(-1)


def schedule(tcfg: Any):
    """Multiplier of the peak rate at update k: linear warmup over ``warmup_steps``, then a linear decay to 0
    at ``steps`` (counted from update 0), or constant."""
    warm, total = tcfg.warmup_steps, tcfg.steps
    if tcfg.lr_decay == "constant":
        return lambda k: k / warm if k < warm else 1.0
    assert tcfg.lr_decay == "bert", tcfg.lr_decay
    return lambda k: k / warm if k < warm else max(0.0, 1.0 - k / total)


def train(model: BengioNnlm, batches: Sequence[dict[str, np.ndarray]], tcfg: Any, order: int) -> np.ndarray:
    """Trains ``model`` on ptm's host batches; returns the loss of each step."""
    assert tcfg.optimizer == "adam"
    biases = [p for name, p in model.named_parameters() if name.endswith("bias")]
    weights = [p for name, p in model.named_parameters() if not name.endswith("bias")]
    opt = torch.optim.Adam([{"params": weights, "weight_decay": tcfg.weight_decay},
                            {"params": biases, "weight_decay": 0.0}],
                           lr=tcfg.learning_rate, betas=(tcfg.adam_b1, tcfg.adam_b2), eps=tcfg.adam_eps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(tcfg))
    losses = []
    for b in batches:
        ctx, target = contexts(b["window_ids"].astype(np.int64), order)
        w = torch.from_numpy(b["target_weights"].reshape(-1))
        ce = torch.nn.functional.cross_entropy(model(torch.from_numpy(ctx)), torch.from_numpy(target),
                                               reduction="none")
        loss = (ce * w).sum() / w.sum().clamp(min=1.0)
        opt.zero_grad()
        loss.backward()
        if tcfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.clip_norm)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return np.array(losses)
