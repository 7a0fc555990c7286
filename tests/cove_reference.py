"""The MT-LSTM in PyTorch, for tests/test_cove.py: the encoder as salesforce/cove's ``cove/encoder.py``
``MTLSTM`` builds it (two ``nn.LSTM(bidirectional=True, batch_first=True)`` layers, ``rnn1`` over the input vectors
and ``rnn2`` over its outputs, each over ``pack_padded_sequence``), and an attentional decoder written from McCann
et al. 2017 Sec. 3 with torch's own pieces (``nn.LSTMCell`` layers with input feeding, ``nn.Linear`` attention,
tanh context layer and output layer), started from the encoder's final [forward; backward] states; with
``load_ptm`` to copy ptm's parameters in."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class TorchMTLSTM(nn.Module):
    def __init__(self, d_in: int, hidden: int):
        super().__init__()
        self.rnn1 = nn.LSTM(d_in, hidden, num_layers=1, bidirectional=True, batch_first=True)
        self.rnn2 = nn.LSTM(2 * hidden, hidden, num_layers=1, bidirectional=True, batch_first=True)

    def forward(self, x, lengths):
        outs, finals = [], []
        total = x.shape[1]
        for rnn in (self.rnn1, self.rnn2):
            packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
            y, (h, c) = rnn(packed)
            x, _ = pad_packed_sequence(y, batch_first=True, total_length=total)
            outs.append(x)
            finals.append((torch.cat([h[0], h[1]], -1), torch.cat([c[0], c[1]], -1)))
        return outs, finals


class TorchTranslator(nn.Module):
    def __init__(self, d_in: int, hidden: int, dec: int, embed: int, vocab: int):
        super().__init__()
        self.encoder = TorchMTLSTM(d_in, hidden)
        self.embedding = nn.Embedding(vocab, embed)
        self.cells = nn.ModuleList([nn.LSTMCell(embed + dec, dec), nn.LSTMCell(dec, dec)])
        self.attention = nn.Linear(dec, 2 * hidden)
        self.context = nn.Linear(2 * hidden + dec, dec)
        self.output = nn.Linear(dec, vocab)

    def forward(self, vectors, mask, prev_ids):
        lengths = mask.sum(1).cpu()
        outs, finals = self.encoder(vectors, lengths)
        states = outs[-1]
        layers = [(h, c) for h, c in finals]
        h_tilde = torch.zeros(vectors.shape[0], self.context.out_features)
        z = self.embedding(prev_ids)
        steps = []
        for t in range(prev_ids.shape[1]):
            x = torch.cat([z[:, t], h_tilde], -1)
            for l, cell in enumerate(self.cells):
                layers[l] = cell(x, layers[l])
                x = layers[l][0]
            scores = torch.bmm(states, self.attention(x).unsqueeze(2)).squeeze(2)
            alpha = torch.softmax(scores.masked_fill(mask == 0, -1e9), -1)
            ctx = torch.bmm(alpha.unsqueeze(1), states).squeeze(1)
            h_tilde = torch.tanh(self.context(torch.cat([ctx, x], -1)))
            steps.append(h_tilde)
        return self.output(torch.stack(steps, 1))


def _t(a) -> torch.Tensor:
    return torch.tensor(np.array(a, np.float32))


def load_encoder(enc: TorchMTLSTM, tree: dict) -> None:
    """ptm's ``encoder`` params (``{'lstm_0': {'forward', 'backward'}, ...}``) into rnn1, rnn2."""
    with torch.no_grad():
        for i, rnn in enumerate((enc.rnn1, enc.rnn2)):
            for d, suffix in (("forward", ""), ("backward", "_reverse")):
                w = tree[f"lstm_{i}"][d]
                getattr(rnn, f"weight_ih_l0{suffix}").copy_(_t(w["kernel"]).T)
                getattr(rnn, f"weight_hh_l0{suffix}").copy_(_t(w["recurrent_kernel"]).T)
                getattr(rnn, f"bias_ih_l0{suffix}").copy_(_t(w["bias"]))
                getattr(rnn, f"bias_hh_l0{suffix}").copy_(_t(w["recurrent_bias"]))


def load_ptm(model: TorchTranslator, params: dict) -> None:
    """ptm's ``{'params': {'cove': ...}}`` into the whole network."""
    tree = params["params"]["cove"]
    load_encoder(model.encoder, tree["encoder"])
    dec = tree["decoder"]
    with torch.no_grad():
        model.embedding.weight.copy_(_t(dec["embedding"]))
        for l, cell in enumerate(model.cells):
            w = dec[f"lstm_{l}"]
            cell.weight_ih.copy_(_t(w["kernel"]).T)
            cell.weight_hh.copy_(_t(w["recurrent_kernel"]).T)
            cell.bias_ih.copy_(_t(w["bias"]))
            cell.bias_hh.copy_(_t(w["recurrent_bias"]))
        for name in ("attention", "context", "output"):
            layer = getattr(model, name)
            layer.weight.copy_(_t(dec[name]["kernel"]).T)
            layer.bias.copy_(_t(dec[name]["bias"]))


def train(model: TorchTranslator, batches: list[dict], lr: float) -> np.ndarray:
    """Plain SGD over ``batches`` (ptm's host batches); the loss of each step (mean CE over real target words)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for b in batches:
        logits = model(torch.tensor(b["source"]), torch.tensor(b["source_mask"]), torch.tensor(b["target_in"]).long())
        w = torch.tensor(b["target_weights"])
        ce = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                         torch.tensor(b["target_out"]).long().reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / w.sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses)
