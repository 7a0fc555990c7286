"""The reference side of ULMFiT's LM trajectory parity: fastai's AWD-LSTM language model
(``get_language_model(AWD_LSTM, ...)``, ``fastai/text/models``) trained with fastai's own pieces on ptm's batches.

- the model: fastai's ``AWD_LSTM`` + ``LinearDecoder`` (tied, with bias); its hidden state carries from batch to
  batch (``self.hidden``, detached) and ``reset()`` zeroes it where ptm's stream starts a pass (the batch's
  ``reset`` flag; fastai's ``ModelResetter`` resets once per epoch);
- each batch is fed at its real width (ptm pads a variable-BPTT batch to its bucket and weighs the padding 0;
  fastai's LM batches have no padding);
- the loss: ``CrossEntropyLossFlat`` plus fastai's ``RNNRegularizer`` terms (AR: alpha * mean(out^2) of the last
  layer's dropped output; TAR: beta * mean((h_t - h_{t-1})^2) of its raw output);
- the optimizer: fastai's ``Adam`` (``fastai/optimizer.py``: ``average_grad`` with dampening, ``average_sqr_grad``,
  ``step_stat``, ``adam_step``'s debiasing, decoupled ``weight_decay``) over ``awd_lstm_lm_split``'s layer groups;
  ptm's weight-decay exclusions through fastai's own switch (``state['do_wd'] = False``, what
  ``Learner(wd_bn_bias=False)`` sets); discriminative rates through ``set_hyper('lr', [...])`` per group;
  ``torch.nn.utils.clip_grad_norm_`` (fastai's ``GradientClip``) before the step;
- the schedule: ULMFiT's slanted triangular rates from fastai's ``combine_scheds`` of two ``SchedLin`` at
  pct = step / steps (what ``ParamScheduler`` evaluates), or a constant rate."""
from __future__ import annotations

import importlib
from typing import Any, Sequence

import numpy as np


def _fastai(name: str):
    return importlib.import_module(f"fastai.{name}")


def build(model_cfg: Any, seed: int, pad_id: int):
    """fastai's AWD-LSTM LM with ``model_cfg``'s sizes and dropouts, initialised by fastai under
    ``torch.manual_seed(seed)``."""
    import torch

    awd, core = _fastai("text.models.awdlstm"), _fastai("text.models.core")
    torch.manual_seed(seed)
    m = model_cfg
    config = dict(emb_sz=m.embed_dim, n_hid=m.hidden_dim, n_layers=m.num_layers, pad_token=pad_id, bidir=False,
                  output_p=m.output_p, hidden_p=m.hidden_p, input_p=m.input_p, embed_p=m.embed_p,
                  weight_p=m.weight_p, tie_weights=m.tie_weights, out_bias=True)
    return core.get_language_model(awd.AWD_LSTM, m.vocab_size, config=config)


def state_arrays(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def schedule(tcfg: Any):
    """Step -> learning rate, from fastai's schedule functions."""
    sched = _fastai("callback.schedule")
    lr, steps = tcfg.learning_rate, tcfg.steps
    if tcfg.lr_decay == "slanted_triangular":
        ratio = 1.0 / tcfg.min_lr_ratio if tcfg.min_lr_ratio > 0 else 32.0
        cut = tcfg.warmup_steps / steps
        f = sched.combine_scheds([cut, 1.0 - cut], [sched.SchedLin(lr / ratio, lr), sched.SchedLin(lr, lr / ratio)])
        return lambda t: float(f(t / steps))
    assert tcfg.lr_decay == "constant" and tcfg.warmup_steps == 0, tcfg.lr_decay
    return lambda t: lr


def train(model, batches: Sequence[dict[str, np.ndarray]], tcfg: Any, model_cfg: Any,
          group_lr: Sequence[float] | None = None, no_decay: str = "bias") -> np.ndarray:
    """Trains ``model`` (in training mode where a dropout is on) on ptm's host batches; returns the loss each step
    minimised.
    ``group_lr``: learning-rate multipliers of ``awd_lstm_lm_split``'s groups (the LSTM layers bottom first, then
    the embedding with the decoder); ``no_decay``: parameters whose name contains it get no weight decay."""
    import torch
    import torch.nn.functional as F

    awd, optim = _fastai("text.models.awdlstm"), _fastai("optimizer")
    assert tcfg.optimizer == "adamw" and tcfg.adam_bias_correction, "fastai's Adam debiases its moments"
    groups = awd.awd_lstm_lm_split(model)
    opt = optim.Adam(groups, lr=tcfg.learning_rate, mom=tcfg.adam_b1, sqr_mom=tcfg.adam_b2, eps=tcfg.adam_eps,
                     wd=tcfg.weight_decay, decouple_wd=True)
    for name, p in model.named_parameters():
        if no_decay in name.split(".")[-1]:
            opt.state[p]["do_wd"] = False
    mults = list(group_lr) if group_lr is not None else [1.0] * len(groups)
    lr_at = schedule(tcfg)
    # with every dropout at 0 the modes compute the same; eval mode then, because in training mode fastai's
    # WeightDropout at weight_p=0 sets F.dropout(raw, 0)'s result, the raw Parameter itself, on the LSTM, which
    # registers it there, and the next reset() fails to assign a plain tensor in its place
    m = model_cfg
    model.train(any(p > 0 for p in (m.output_p, m.hidden_p, m.input_p, m.embed_p, m.weight_p)))
    model.reset()
    losses = []
    for t, b in enumerate(batches):
        if b["reset"].any():
            assert b["reset"].all(), "fastai resets every row at once"
            model.reset()
        width = int(b["target_weights"][0].sum())
        assert np.all(b["target_weights"][:, :width] == 1) and not b["target_weights"][:, width:].any()
        x = torch.from_numpy(b["input_ids"][:, :width].astype(np.int64))
        y = torch.from_numpy(b["target_ids"][:, :width].astype(np.int64))
        decoded, raw, out = model(x)
        loss = F.cross_entropy(decoded.reshape(-1, decoded.shape[-1]), y.reshape(-1))
        if model_cfg.ar_alpha:
            loss = loss + model_cfg.ar_alpha * out.float().pow(2).mean()
        if model_cfg.tar_beta and raw.shape[1] > 1:
            loss = loss + model_cfg.tar_beta * (raw[:, 1:] - raw[:, :-1]).float().pow(2).mean()
        loss.backward()
        if tcfg.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.clip_norm)
        opt.set_hyper("lr", [lr_at(t) * m for m in mults])
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return np.array(losses)
