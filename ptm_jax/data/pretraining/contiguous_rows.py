"""Language-model batches of B parallel streams, each read contiguously, so that what a model carries from one
batch to the next (an LSTM's state, Transformer-XL's memory) for row r at the end of a batch is the right context
for row r of the next batch: fastai's ``LMDataLoader`` for the AWD-LSTM (Merity et al. 2018 Sec. 4.1, variable
lengths) and Transformer-XL's ``LMOrderedIterator`` (kimiyoung/transformer-xl ``data_utils.py``: fixed segments of
``tgt_len``, Dai et al. 2019 Sec. 3.2).

Layout. Pass ``e`` of the corpus is GPT's packed stream (``data/pretraining/causal_lm.py`` ``PackedStream``:
the documents in permutation (seed, e), each followed by eos); it is cut into B equal row regions of R =
pass_tokens // B tokens (the remainder is dropped). Row r of pass e reads its region from the start; each batch
advances every row by the batch's length. A pass ends when a row region has no next token left; the last batch
of a pass is shortened to fit, and the next batch starts pass e + 1 with ``reset = 1`` (the carried state is
zeroed: fastai resets the model's hidden state at each epoch start, Transformer-XL's ``train()`` starts each
epoch with empty memory).

Lengths. Fixed (``variable=False``, Transformer-XL): every batch is bptt long but the last of a pass. Variable
(the AWD-LSTM): every batch of the run draws its length from one stream keyed on the seed (chunks of 65,536
draws, each from a generator keyed on (seed, chunk)), so global batch i uses draw i: bptt with probability
``bptt_p``, else bptt / 2; then ``max(5, int(N(that, bptt_std)))``, capped at ``data.max_bptt``; the last batch
of a pass is cut to the rows' end. A start at global batch i finds its pass by bisection over the passes'
starts, which are found once per process from the draws' running sums (one ``searchsorted`` a pass, about 7 us,
and 8 bytes of running sum per batch up to i): no walk batch by batch. The batch is right-padded to the
next multiple of ``bptt_bucket`` (weight 0 past the length): one compiled step per bucket, a handful per run
(``bucket_lengths``). The global batch index fixes (pass, batch in pass), so a run resumes at any step and every
process reads the rows of the same batch (process p: rows [p B/P, (p+1) B/P)).

Evaluation: one pass without shuffling, B rows, fixed length bptt, every target once (``carry`` is not used by
the loop's evaluation: the families' ``Inspection.perplexity`` hooks carry it for the reported perplexity).
"""
from __future__ import annotations

import bisect
import functools
from typing import Iterator

import numpy as np

from ptm_jax.data.pretraining.causal_lm import PackedStream
from ptm_jax.errors import ConfigError

MIN_LEN = 5


DRAW_CHUNK = 1 << 16


def bptt_lengths(seed: int, chunk: int, bptt: int, p: float, std: float, max_len: int) -> np.ndarray:
    """Merity et al. 2018 Sec. 4.1 / fastai v0.7 ``LanguageModelLoader``: the lengths of global batches
    [chunk * DRAW_CHUNK, (chunk + 1) * DRAW_CHUNK) of a run."""
    rng = np.random.default_rng([seed, chunk, 7])
    base = np.where(rng.random(DRAW_CHUNK) < p, float(bptt), bptt / 2.0)
    n = np.trunc(rng.normal(base, std)).astype(np.int64)  # int() of each draw, as fastai
    return np.minimum(np.maximum(MIN_LEN, n), max_len)


def bucket_of(length: int, bucket: int, max_len: int) -> int:
    return int(min(-(-length // bucket) * bucket, -(-max_len // bucket) * bucket))


def bucket_lengths(bptt: int, std: float, p: float, bucket: int, max_len: int) -> list[int]:
    """The padded lengths a run can compile (each one step compilation), from bptt/2 - 3 std to ``max_len``."""
    lo = max(MIN_LEN, int(bptt / 2 - 3 * std)) if p < 1 else max(MIN_LEN, int(bptt - 3 * std))
    return sorted({bucket_of(n, bucket, max_len) for n in range(lo, max_len + 1)})


class LmBatches:
    """Fixed- or variable-length (``variable``), state-carrying LM batches of a ``PackedStream`` (see the module docstring)."""

    def __init__(self, stream: PackedStream, global_batch: int, *, bptt: int, variable: bool, p: float, std: float,
                 bucket: int, max_len: int, seed: int, pad_id: int):
        self.stream, self.B = stream, int(global_batch)
        self.R = stream.pass_tokens // self.B
        if self.R < 2:
            raise ConfigError(f"the corpus has {stream.pass_tokens} tokens per pass: too few for "
                              f"train.batch_size={self.B} parallel rows of at least 2 tokens; lower the batch size")
        self.bptt, self.variable, self.p, self.std = int(bptt), bool(variable), float(p), float(std)
        self.bucket, self.max_len, self.seed, self.pad_id = int(bucket), int(max_len), int(seed), int(pad_id)
        self._starts = [0]  # the global batch index of each pass's start found so far (variable lengths)
        self._sums = np.zeros(1, np.int64)  # running sums of the lengths drawn so far: [k] = sum of batches < k

    def _pass_starts(self, index: int) -> list[int]:
        """The pass starts up to the first one past batch ``index``: pass e + 1 starts after the first batch of
        pass e whose running sum reaches the rows' R - 1 inputs. Lengths are drawn a chunk at a time as needed."""
        while self._starts[-1] <= index:
            target = int(self._sums[self._starts[-1]]) + self.R - 1
            while int(self._sums[-1]) < target:
                chunk = (len(self._sums) - 1) // DRAW_CHUNK
                drawn = bptt_lengths(self.seed, chunk, self.bptt, self.p, self.std, self.max_len)
                self._sums = np.concatenate([self._sums, int(self._sums[-1]) + np.cumsum(drawn)])
            self._starts.append(int(np.searchsorted(self._sums, target)))  # the pass ends where the sum reaches it
        return self._starts

    def locate(self, index: int) -> tuple[int, int]:
        """Global batch index -> (pass, batch within the pass)."""
        if not self.variable:
            per = -(-(self.R - 1) // self.bptt)
            return index // per, index % per
        starts = self._pass_starts(index)
        epoch = bisect.bisect_right(starts, index) - 1
        return epoch, index - starts[epoch]

    @functools.lru_cache(maxsize=8)
    def pass_lengths(self, epoch: int) -> np.ndarray:
        """The lengths of pass ``epoch``'s batches: they use R - 1 inputs per row exactly (the last one cut)."""
        need = self.R - 1
        if not self.variable:
            full, rest = divmod(need, self.bptt)
            return np.asarray([self.bptt] * full + ([rest] if rest else []), np.int64)
        while len(self._starts) < epoch + 2:  # the pass's end is the next pass's start
            self._pass_starts(self._starts[-1])
        lo, hi = self._starts[epoch], self._starts[epoch + 1]
        out = np.diff(self._sums[lo:hi + 1])
        out[-1] = need - int(out[:-1].sum())
        return out

    def batch(self, index: int, rows: slice) -> dict[str, np.ndarray]:
        epoch, j = self.locate(index)
        lengths = self.pass_lengths(epoch)
        n, off = int(lengths[j]), int(lengths[:j].sum())
        width = bucket_of(n, self.bucket, self.max_len) if self.variable else self.bptt
        r = np.arange(self.B)[rows]
        ids = np.full((len(r), width), self.pad_id, np.int32)
        tgt = np.full((len(r), width), self.pad_id, np.int32)
        base = epoch * self.stream.pass_tokens
        for k, row in enumerate(r):
            lo = int(base + int(row) * self.R + off)
            toks = self.stream.span(lo, lo + n + 1)[0]
            ids[k, :n], tgt[k, :n] = toks[:n], toks[1:n + 1]
        w = np.zeros((len(r), width), np.float32)
        w[:, :n] = 1.0
        return {"target_weights": w, "input_ids": ids, "target_ids": tgt,
                "reset": np.full((len(r),), 1 if j == 0 else 0, np.int32)}

    def iterate(self, start_index: int, process_index: int, process_count: int) -> Iterator[dict[str, np.ndarray]]:
        per = self.B // process_count
        rows = slice(process_index * per, (process_index + 1) * per)
        i = start_index
        while True:
            yield self.batch(i, rows)
            i += 1


def eval_batches(stream: PackedStream, global_batch: int, bptt: int, pad_id: int, process_index: int,
                 process_count: int) -> Iterator[dict[str, np.ndarray]]:
    """One pass in B row regions, fixed length bptt, the last batch padded with weight 0."""
    R = stream.pass_tokens // global_batch
    per = global_batch // process_count
    rows = range(process_index * per, (process_index + 1) * per)
    for off in range(0, max(R - 1, 0), bptt):
        n = min(bptt, R - 1 - off)
        ids = np.full((per, bptt), pad_id, np.int32)
        tgt = np.full((per, bptt), pad_id, np.int32)
        for k, row in enumerate(rows):
            toks = stream.span(int(row * R + off), int(row * R + off + n + 1))[0]
            ids[k, :n], tgt[k, :n] = toks[:n], toks[1:]
        w = np.zeros((per, bptt), np.float32)
        w[:, :n] = 1.0
        yield {"target_weights": w, "input_ids": ids, "target_ids": tgt,
               "reset": np.full((per,), 1 if off == 0 else 0, np.int32)}
