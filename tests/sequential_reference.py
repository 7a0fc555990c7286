"""word2vec.c's and fastText's loops over one packed batch in numpy (``model.updates='sequential'``, the fused
kernel's ``families/word2vec/sequential.h``), for the tests of word2vec and fastText: centers in stream order; each
hidden vector (a skip-gram pair's context row, a mean of rows) scored against its targets at the rows before the
pair's moves; then each target row moves by -lr g h in target order (a repeated target sees its earlier move in
its neu1e term), and the input rows by -lr w neu1e."""
import math

import numpy as np


def score_and_move(t: dict, h: np.ndarray, targets: list, scale: float, lr: float) -> tuple[np.ndarray, float]:
    """(neu1e, loss) of ``h`` against ``targets`` [(table, row, label, weight)], the target rows of ``t`` moved."""
    g, loss = [], 0.0
    for table, i, label, w in targets:
        s = float(h @ t[table][i])
        x = -s if label > 0.5 else s
        loss += scale * w * (max(x, 0.0) + math.log1p(math.exp(-abs(x))))
        sig = 1.0 / (1.0 + math.exp(-x))
        g.append(-scale * w * sig if label > 0.5 else scale * w * sig)
    err = np.zeros_like(h)
    for (table, i, _, _), gj in zip(targets, g):
        err += np.float32(gj) * t[table][i]
        t[table][i] -= np.float32(lr * gj) * h
    return err, loss


def live_slots(weight: np.ndarray, row_of: np.ndarray, r: int, block: int) -> list[int]:
    """The flat slots of row ``r`` (block-relative ``row_of``) with a nonzero weight, in slot order."""
    per = weight.shape[1]
    b0 = (r // block) * block
    w, rows = weight.reshape(-1), row_of.reshape(-1)
    return [q for q in range(b0 * per, (b0 + block) * per) if w[q] != 0 and rows[q] == r - b0]


def mean_of(table: np.ndarray, ids: np.ndarray, w: np.ndarray, qs: list[int]) -> np.ndarray:
    return (sum(w[q] * table[ids[q]] for q in qs) / max(sum(w[q] for q in qs), 1.0)).astype(np.float32)


def unpacked(batch: dict, tables: dict) -> tuple:
    """(float32 copies of the tables, center, center_weight, flat pair inputs and weights, K, negatives and their
    weights as [-1, K] rows, whether they are drawn per pair)."""
    t = {k: np.array(v, np.float32) for k, v in tables.items()}
    K = batch["negatives"].shape[-1]
    return (t, batch["center"], batch["center_weight"], batch["pair_input"].reshape(-1),
            batch["pair_weight"].reshape(-1), K, batch["negatives"].reshape(-1, K),
            batch["negative_weight"].reshape(-1, K), batch["negatives"].ndim == 3)


def word2vec_sequential(batch: dict, tables: dict, lr: float, cbow: bool, block: int) -> tuple[dict, float]:
    """word2vec: a skip-gram pair's context row, or a CBOW center's mean of context rows, against the center's
    output row, its negatives (the center's, or the pair's own) and its Huffman path."""
    t, cen, cw, pin, pw, K, ng, nw, per_pair = unpacked(batch, tables)
    loss = 0.0
    for r in range(len(cen)):
        ps = live_slots(batch["pair_weight"], batch["pair_row"], r, block)
        if not ps or cw[r] == 0:
            continue
        shared = [("output", cen[r], 1.0, 1.0)]
        shared += [] if per_pair else [("output", ng[r, k], 0.0, nw[r, k]) for k in range(K) if nw[r, k] != 0]
        shared += [("hs_output", batch["path"][r, j], 1.0 - batch["code"][r, j], batch["path_weight"][r, j])
                   for j in range(batch["path"].shape[1]) if batch["path_weight"][r, j] != 0]
        if cbow:
            err, part = score_and_move(t, mean_of(t["input"], pin, pw, ps), shared, cw[r], lr)
            for p in ps:
                t["input"][pin[p]] -= np.float32(lr * pw[p]) * err
            loss += part
            continue
        for p in ps:
            own = [("output", ng[p, k], 0.0, nw[p, k]) for k in range(K) if per_pair and nw[p, k] != 0]
            err, part = score_and_move(t, t["input"][pin[p]].copy(), shared + own, pw[p], lr)
            t["input"][pin[p]] -= np.float32(lr) * err
            loss += part
    return t, loss


def fasttext_sequential(batch: dict, tables: dict, lr: float, cbow: bool, block: int, subwords
                        ) -> tuple[dict, float]:
    """fastText (Model::update per pair): the mean of the center's units (``subwords``: its row of the n-gram
    table, fastText's getSubwords) against each pair's context word and the negatives that differ from it
    (skip-gram; the center's shared draws or the pair's own), or the mean of the context words' units, in pair
    order, against the center and its negatives (CBOW); every unit row then moves by -lr grad."""
    t, cen, cw, pin, pw, K, ng, nw, per_pair = unpacked(batch, tables)
    loss = 0.0
    for r in range(len(cen)):
        ps = live_slots(batch["pair_weight"], batch["pair_row"], r, block)
        words = [pin[p] for p in ps] if cbow else [cen[r]] * bool(ps)
        un = [u for w in words for u in subwords.ids[w, :subwords.lengths[w]]]
        if not un:
            continue
        steps = []
        if cbow and cw[r] != 0:
            steps.append(([("output", cen[r], 1.0, 1.0)] + [("output", ng[r, k], 0.0, nw[r, k]) for k in range(K)
                                                             if nw[r, k] != 0], cw[r]))
        for p in [] if cbow else ps:
            negs = ([ng[p, k] for k in range(K) if nw[p, k] != 0] if per_pair
                    else [ng[r, k] for k in range(K) if nw[r, k] != 0 and ng[r, k] != pin[p]])
            steps.append(([("output", pin[p], 1.0, 1.0)] + [("output", n, 0.0, 1.0) for n in negs], pw[p]))
        qs, ones = list(range(len(un))), np.ones(len(un), np.float32)
        for targets, scale in steps:
            err, part = score_and_move(t, mean_of(t["input"], np.asarray(un), ones, qs), targets, scale, lr)
            for u in un:
                t["input"][u] -= np.float32(lr) * err
            loss += part
    return t, loss


def part_start(nb: int, parts: int, p: int) -> int:
    """The first block of part ``p`` (``sequential_parts.h`` ``PartStart``)."""
    return 0 if p == 0 else nb * (4 + 5 * (p - 1)) // (4 + 5 * (parts - 1))


def in_parts(reference, batch: dict, tables: dict, lr: float, cbow: bool, block: int,
             parts: int) -> tuple[dict, float]:
    """``model.sequential_parts`` (the kernel's ``sequential_parts.h``): ``reference`` over each of ``parts``
    contiguous runs of the batch's blocks (part 0 takes 4 blocks for each later part's 5, ``part_start``), every
    run from ``tables``; the result is part 0's tables plus each later part's moves, and the summed loss."""
    nb = len(batch["center"]) // block
    base = {k: np.array(v, np.float32) for k, v in tables.items()}
    out, loss = None, 0.0
    for p in range(parts):
        a, e = part_start(nb, parts, p) * block, part_start(nb, parts, p + 1) * block
        t, part_loss = reference({k: v[a:e] for k, v in batch.items()}, tables, lr, cbow, block)
        loss += part_loss
        if out is None:
            out = t
        else:
            for k in out:
                out[k] += t[k] - base[k]
    return out, loss
