"""A PyTorch reference of the CVT tagger's losses (Clark et al. 2018, Sec. 2 Eq. 1-2 and Sec. 3.1), written from the
paper rather than from ptm_jax/jobs/cvt (the authors' TF1 code, tensorflow/models research/cvt_text, needs
tf.contrib and does not run under TensorFlow 2); tests/test_cvt.py checks the job against it."""
from __future__ import annotations

import jax
import numpy as np


def torch_reference(params, H1):
    """The CVT tagger and losses in PyTorch from the paper (Sec. 2 Eq. 1-2, Sec. 3.1), one sentence at a time:
    nn.LSTM per direction (the backward one over the reversed words), NN(h) = Linear -> ReLU -> Linear, teacher
    probabilities detached. Weights copied from the JAX tree (a Dense kernel [in, out] is a Linear's weight.T)."""
    import torch

    p = jax.tree.map(lambda v: np.asarray(v, np.float64), params["params"])

    def t(a):
        return torch.nn.Parameter(torch.tensor(a, dtype=torch.float64))

    emb = t(p["inputs"]["embedding"])
    lstms = {}
    for layer in ("bilstm_1", "bilstm_2"):
        for d in ("forward", "backward"):
            w = p[layer][d]
            m = torch.nn.LSTM(w["kernel"].shape[0], w["kernel"].shape[1] // 4).double()
            m.weight_ih_l0, m.weight_hh_l0 = t(w["kernel"].T), t(w["recurrent_kernel"].T)
            m.bias_ih_l0 = t(w["bias"])
            m.bias_hh_l0 = torch.nn.Parameter(torch.zeros_like(m.bias_ih_l0), requires_grad=False)
            lstms[layer, d] = m
    modules = {}
    for name in ("primary", "forward", "backward", "future", "past"):
        hid, out = p[name]["hidden"], p[name]["output"]
        a, b = torch.nn.Linear(*hid["kernel"].shape).double(), torch.nn.Linear(*out["kernel"].shape).double()
        a.weight, a.bias, b.weight, b.bias = t(hid["kernel"].T), t(hid["bias"]), t(out["kernel"].T), t(out["bias"])
        modules[name] = torch.nn.Sequential(a, torch.nn.ReLU(), b)

    def bilstm(layer, x):
        f = lstms[layer, "forward"](x)[0]
        b = torch.flip(lstms[layer, "backward"](torch.flip(x, [0]))[0], [0])
        return f, b

    def sentence(ids):
        x = emb[torch.tensor(ids)]
        f1, b1 = bilstm("bilstm_1", x)
        h1 = torch.cat([f1, b1], -1)
        f2, b2 = bilstm("bilstm_2", h1)
        z1 = torch.zeros(1, H1, dtype=torch.float64)
        views = {"forward": f1, "backward": b1, "future": torch.cat([z1, f1[:-1]]), "past": torch.cat([b1[1:], z1])}
        out = {"primary": modules["primary"](torch.cat([h1, f2, b2], -1))}
        out.update({k: modules[k](v) for k, v in views.items()})
        return out

    def supervised(rows):
        total, words = 0.0, 0
        for ids, tags in rows:
            logp = torch.log_softmax(sentence(ids)["primary"], -1)
            total = total - logp[torch.arange(len(tags)), torch.tensor(tags)].sum()
            words += len(tags)
        return total / words

    def cvt(rows):
        total, words = 0.0, 0
        for ids in rows:
            out = sentence(ids)
            p_log = torch.log_softmax(out["primary"], -1).detach()
            for k in ("forward", "backward", "future", "past"):
                q_log = torch.log_softmax(out[k], -1)
                total = total + (p_log.exp() * (p_log - q_log)).sum()
            words += len(ids)
        return total / words

    trained = [emb, *[q for m in lstms.values() for q in m.parameters() if q.requires_grad],
               *[q for m in modules.values() for q in m.parameters()]]
    return supervised, cvt, trained
