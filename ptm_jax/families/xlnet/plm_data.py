"""XLNet permutation-LM examples streamed through tf.data: deterministic, stateless, independent of host count.

Layout of the stream (zihangdai/xlnet data_utils.py ``create_tfrecords`` / ``_split_a_and_b``, made stateless):

* Pass ("epoch") e concatenates the documents in an order keyed on (seed, e) into one token stream of N tokens,
  read cyclically (position N is position 0); sentence and document starts are the cut points. No <eod> token
  is inserted (our vocabularies have none): documents simply follow each other, as in the reference without
  ``use_eod``.
* Like the reference's ``batchify``, the stream is read by G_s parallel rows (G_s = global batch, or half of it
  with ``bi_data``): row r starts at ``floor(r * N / G_s)`` and its sample at step s starts ``s * stride``
  further, stride = reuse_len (reference) or ``L - 3`` when reuse_len = 0 (the reference needs reuse_len > 0).
  So the reuse part of a row's sample is the text that followed the previous step's reuse part: the row's
  Transformer-XL memory (``reuse_len`` states of the previous step) really precedes it. A pass has
  ``ceil(N / (G_s * stride))`` steps; every step is one complete global batch. The stream therefore depends on
  the global batch size (keep it when resuming), never on the process count.
* Sample at offset o: reuse part ``[o, o + R)``, then A and B fill ``tot = L - R - 3`` tokens. Cut points are
  sentence starts strictly inside ``(o + R, o + R + tot)``; ``end`` is the first start at or after
  ``o + R + tot``. With no cut point, or with p = 0.5, B is random (``is_next`` = 0): A ends at a random cut
  point (or at ``end``), B is ``max(1, tot - |A|)`` tokens from a uniform position of the stream, widened to
  whole sentences. Otherwise (``is_next`` = 1) A ends at a random cut point and B runs from there to ``end``.
  Then the longer side loses its last token until ``|A| + |B| = tot`` (tie: B), computed in closed form.
  ``input_ids = reuse + A + [SEP] + B + [SEP] + [CLS]`` (always exactly L, no padding); segment ids 0 through
  the first [SEP], 1 through the second, 2 for [CLS].
* bi_data: rows ``[G/2, G)`` of every global batch read the same pass stream reversed (token order flipped,
  sentence starts mirrored), exactly as the reference's backward rows read their row's data flipped; the
  layout (reuse, A, [SEP], B, [SEP], [CLS]) is the same. ``is_reversed`` marks those rows.

Targets and factorization orders: ``permutation``. Every random choice of example ``index`` (its position in
the global stream, which fixes pass, step and row) comes from numpy Philox with key = seed and the example's own
counter range, so a local batch equals the rows of the global batch it covers, and resuming at ``start_index``
yields exactly the tail of a run from 0. tf.data calls numpy once per local batch (``tf.numpy_function``); per
sample the Python work is a few document slices, bisections and the span loop (about P/3 iterations).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from ptm_jax.families.xlnet.config import XlnetDataConfig
from ptm_jax.data.pretraining import masking, nsp
from ptm_jax.data.pretraining.row_dataset import rows_dataset
from ptm_jax.data.pretraining.source import DocumentSource, SpecialIds
from ptm_jax.errors import ConfigError, DataError
from ptm_jax.families.xlnet.permutation import (
    SPAN_DRAWS_PER_POSITION,
    attention_ranks,
    factorization_ranks,
    part_budgets,
    perm_mask,
    sample_spans,
    target_features,
    target_mapping,
)

_PASS_STREAM, _SAMPLE_STREAM = 1, 2   # Philox counter tags (bits 192..255)


def feature_spec(rows: int | None, cfg: XlnetDataConfig) -> dict[str, tf.TensorSpec]:
    """Shapes and dtypes of a local batch of ``rows`` examples (None: any number)."""
    length, p = cfg.max_seq_length, cfg.max_predictions_per_seq
    return {
        "input_ids": tf.TensorSpec([rows, length], tf.int32),
        "segment_ids": tf.TensorSpec([rows, length], tf.int32),
        "perm_mask": tf.TensorSpec([rows, length, length], tf.float32),
        "target_mapping": tf.TensorSpec([rows, p, length], tf.float32),
        "target_ids": tf.TensorSpec([rows, p], tf.int32),
        "target_weights": tf.TensorSpec([rows, p], tf.float32),
        "target_positions": tf.TensorSpec([rows, p], tf.int32),
        "input_q": tf.TensorSpec([rows, length], tf.float32),
        "is_next": tf.TensorSpec([rows], tf.int32),
        "is_reversed": tf.TensorSpec([rows], tf.int32),
        "example_id": tf.TensorSpec([rows], tf.int64),
    }


@dataclass(frozen=True)
class PlmLayout:
    """How the global example stream maps onto the corpus for one (config, global batch, corpus size)."""

    seq_len: int
    reuse_len: int
    pair_len: int          # tot = L - R - 3: tokens of A and B together
    stride: int
    streams: int           # parallel rows reading the stream forward (G, or G/2 with bi_data)
    global_batch: int
    num_tokens: int
    steps_per_pass: int
    budgets: tuple[int, int]

    @property
    def examples_per_pass(self) -> int:
        return self.steps_per_pass * self.global_batch

    @property
    def draws(self) -> int:
        """Uniforms per example: 4 scalars, L permutation keys, L fill keys, 2L span draws."""
        return 4 + (2 + SPAN_DRAWS_PER_POSITION) * self.seq_len


def plm_layout(cfg: XlnetDataConfig, global_batch: int, num_tokens: int) -> PlmLayout:
    length, reuse, p = cfg.max_seq_length, cfg.reuse_len, cfg.max_predictions_per_seq
    pair = length - reuse - 3
    if reuse < 0 or pair < 2:
        raise ConfigError(f"data.reuse_len={reuse} must be in [0, max_seq_length - 5 = {length - 5}]: A and B "
                          "need at least one token each beside [SEP] [SEP] [CLS]")
    if cfg.perm_size < 0:
        raise ConfigError(f"data.perm_size={cfg.perm_size} must be >= 0 (0 = one block per part)")
    if cfg.max_span < 1 or not (cfg.mask_alpha > 0 and cfg.mask_beta > 0):
        raise ConfigError(f"data.max_span={cfg.max_span} must be >= 1 and data.mask_alpha={cfg.mask_alpha}, "
                          f"data.mask_beta={cfg.mask_beta} positive")
    budgets = part_budgets(length, reuse, p)
    if p < 1 or budgets[0] > reuse or budgets[1] > pair:
        raise ConfigError(f"data.max_predictions_per_seq={p} (XLNet num_predict) splits into {budgets[0]} targets "
                          f"in the reuse part of {reuse} tokens and {budgets[1]} in the {pair} A/B tokens; it "
                          "must be positive and fit both: lower it")
    if cfg.bi_data and global_batch % 2:
        raise ConfigError(f"data.bi_data needs an even global batch (half is the reversed stream), got "
                          f"{global_batch}")
    streams = global_batch // 2 if cfg.bi_data else global_batch
    stride = reuse if reuse else pair
    steps = max(1, -(-num_tokens // (streams * stride)))
    return PlmLayout(length, reuse, pair, stride, streams, global_batch, num_tokens, steps, budgets)


def _philox(seed: int, counter: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(key=seed, counter=counter))


class _PassStream:
    """One pass's cyclic token stream (documents in a keyed order), read forward or reversed."""

    def __init__(self, source: DocumentSource, doc_lengths: np.ndarray, seed: int, epoch: int):
        self._source = source
        self.order = _philox(seed, (_PASS_STREAM << 192) | (epoch << 128)).permutation(doc_lengths.size)
        self.cum = np.concatenate([[0], np.cumsum(doc_lengths[self.order])])
        self.n = int(self.cum[-1])

    def _doc(self, x: int) -> tuple[int, int, np.ndarray]:
        """(k, offset, sentence starts of the k-th document in pass order) for stream position x in [0, N)."""
        k = int(np.searchsorted(self.cum, x, side="right")) - 1
        d = int(self.order[k])
        lengths = self._source.doc_sentence_lengths(d)
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return k, x - int(self.cum[k]), starts

    def _forward(self, x0: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = np.empty(width, dtype=np.int32)
        first = np.zeros(width, dtype=bool)
        x, filled = x0 % self.n, 0
        while filled < width:
            k, off, starts = self._doc(x)
            doc = self._source.doc_tokens(int(self.order[k]))
            take = min(doc.size - off, width - filled)
            tokens[filled:filled + take] = doc[off:off + take]
            inside = starts[(starts >= off) & (starts < off + take)]
            first[filled + inside - off] = True
            filled += take
            x = (x + take) % self.n
        return tokens, first

    def window(self, y0: int, width: int, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, sentence-start flags) of positions ``[y0, y0 + width)`` of the (reversed) stream."""
        if not reverse:
            return self._forward(y0, width)
        tokens, first = self._forward(self.n - y0 % self.n - width, width + 1)
        return tokens[width - 1::-1] if width else tokens[:0], first[width:0:-1]

    def _start_le(self, x: int) -> int:
        if x >= self.n:
            return self.n
        k, off, starts = self._doc(x)
        return int(self.cum[k] + starts[np.searchsorted(starts, off, side="right") - 1])

    def _start_ge(self, x: int) -> int:
        if x >= self.n:
            return self.n
        k, off, starts = self._doc(x)
        j = int(np.searchsorted(starts, off, side="left"))
        return int(self.cum[k] + starts[j]) if j < starts.size else int(self.cum[k + 1])

    def start(self, y: int, reverse: bool, after: bool) -> int:
        """The last sentence start <= y (``after`` False) or the first >= y, in the (reversed) stream."""
        base, r = y - y % self.n, y % self.n
        if not reverse:
            return base + (self._start_ge(r) if after else self._start_le(r))
        return base + self.n - (self._start_le(self.n - r) if after else self._start_ge(self.n - r))


def _pair_lengths(la: int, lb: int, tot: int) -> tuple[int, int]:
    """Lengths after popping the longer side's last token (tie: B) until ``la + lb <= tot``."""
    if la + lb <= tot:
        return la, lb
    la = min(la, max(-(-tot // 2), tot - lb))
    return la, tot - la


class PlmBatchBuilder:
    """Builds any rows of any global batch of the stream (pure numpy); ``plm_dataset`` wraps it in tf.data."""

    def __init__(self, source: DocumentSource, special: SpecialIds, cfg: XlnetDataConfig, *, seed: int,
                 global_batch: int):
        self.seed = nsp.check_seed(seed)
        if source.num_docs < 1:
            raise DataError("the pretraining corpus has no documents; check data.corpus and data.eval_documents")
        self.source, self.special, self.cfg = source, special, cfg
        self.doc_lengths = np.fromiter((int(source.doc_sentence_lengths(d).sum()) for d in range(source.num_docs)),
                                       dtype=np.int64, count=source.num_docs)
        if not self.doc_lengths.sum():
            raise DataError("the pretraining corpus has no tokens; check data.corpus and the tokenizer")
        self.layout = plm_layout(cfg, global_batch, int(self.doc_lengths.sum()))
        cont = special.continuation
        self._continuation = np.zeros(special.vocab_size, bool) if cont is None else cont
        self._not_target = np.zeros(special.vocab_size, bool)
        self._not_target[[special.pad, special.cls, special.sep, special.mask]] = True
        self._passes: dict[int, _PassStream] = {}
        self._lock = threading.Lock()

    def _pass(self, epoch: int) -> _PassStream:
        with self._lock:
            stream = self._passes.get(epoch)
            if stream is None:
                stream = _PassStream(self.source, self.doc_lengths, self.seed, epoch)
                self._passes = {k: v for k, v in self._passes.items() if k >= epoch - 1}
                self._passes[epoch] = stream
            return stream

    def document_order(self, epoch: int) -> np.ndarray:
        """Document ids in the order pass ``epoch`` concatenates them."""
        return self._pass(epoch).order

    def uniforms(self, first_index: int, rows: int) -> np.ndarray:
        """float64 [rows, layout.draws]: the draws of examples ``first_index ..``.

        Columns: 0 is_next coin, 1 cut point, 2 random-B position, 3 unused; then L factorization keys, L
        shortfall keys and ``2 L`` span draws (reuse part's first).
        """
        words = self.layout.draws
        counter = (_SAMPLE_STREAM << 192) | (first_index * (words // 4))
        return _philox(self.seed, counter).random((rows, words))

    def _tokens(self, index: int, u: np.ndarray) -> tuple[np.ndarray, int, int, int]:
        """(input_ids [L], |A|, is_next, reversed) of example ``index``."""
        lay = self.layout
        epoch, k = divmod(index, lay.examples_per_pass)
        step, row = divmod(k, lay.global_batch)
        reverse = row >= lay.streams
        stream = self._pass(epoch)
        n, reuse, tot = stream.n, lay.reuse_len, lay.pair_len
        o = (row % lay.streams) * n // lay.streams + step * lay.stride
        begin = o + reuse
        head, first = stream.window(o, reuse + tot, reverse)
        cuts = begin + 1 + np.flatnonzero(first[reuse + 1:])
        end = min(stream.start(begin + tot, reverse, after=True), begin + 2 * tot)
        if cuts.size and u[0] >= 0.5:
            is_next, a_end = 1, int(cuts[int(u[1] * cuts.size)])
            la, lb = _pair_lengths(a_end - begin, min(end - a_end, tot), tot)
            b_start = a_end
        else:
            is_next = 0
            a_end = int(cuts[int(u[1] * cuts.size)]) if cuts.size else end
            la = min(a_end - begin, tot)
            b_len = max(1, tot - la)
            b_begin = int(u[2] * max(n - b_len, 1))
            b_start = stream.start(b_begin, reverse, after=False)
            b_stop = stream.start(b_begin + b_len, reverse, after=True)
            la, lb = _pair_lengths(la, min(b_stop - b_start, tot), tot)
        b = stream.window(b_start, lb, reverse)[0]
        sp = self.special
        ids = np.concatenate([head[:reuse + la], [sp.sep], b, [sp.sep, sp.cls]]).astype(np.int32)
        return ids, la, is_next, int(reverse)

    def _targets(self, ids: np.ndarray, u: np.ndarray, reverse: bool) -> np.ndarray:
        lay, cfg = self.layout, self.cfg
        length, reuse = lay.seq_len, lay.reuse_len
        fill = u[4 + length:4 + 2 * length]
        draws = u[4 + 2 * length:]
        mask = np.zeros(length, dtype=bool)
        for lo, hi, goal in ((0, reuse, lay.budgets[0]), (reuse, length, lay.budgets[1])):
            if goal == 0:
                continue
            part = ids[lo:hi][::-1] if reverse else ids[lo:hi]
            picked, _ = sample_spans(~self._not_target[part], self._continuation[part], goal,
                                     draws[SPAN_DRAWS_PER_POSITION * lo:SPAN_DRAWS_PER_POSITION * hi],
                                     fill[lo:hi], max_span=cfg.max_span, mask_alpha=cfg.mask_alpha,
                                     mask_beta=cfg.mask_beta)
            mask[lo:hi] = picked[::-1] if reverse else picked
        return mask

    def compact_rows(self, first_index: int, count: int) -> dict[str, np.ndarray]:
        """Examples ``[first_index, first_index + count)`` with ``attn_rank`` / ``attn_threshold`` [count, L]
        int32 (``perm_mask[i, j] = attn_threshold[i] <= attn_rank[j]``, plus the reuse block) in place of the
        two large features (tf.data builds those in TensorFlow, off the GIL)."""
        lay, sp = self.layout, self.special
        if first_index + count > masking.MAX_INDEX:
            raise ConfigError(f"example {first_index + count - 1} is beyond the supported stream (index < 2^40)")
        u = self.uniforms(first_index, count)
        length = lay.seq_len
        ids = np.empty((count, length), dtype=np.int32)
        a_len = np.empty(count, dtype=np.int64)
        is_next = np.empty(count, dtype=np.int32)
        reversed_ = np.empty(count, dtype=np.int32)
        for i in range(count):
            ids[i], a_len[i], is_next[i], reversed_[i] = self._tokens(first_index + i, u[i])
        if ids.max() >= sp.vocab_size or ids.min() < 0:
            bad = int(ids.max() if ids.max() >= sp.vocab_size else ids.min())
            raise DataError(f"token id {bad} in examples {first_index}..{first_index + count - 1} is outside the "
                            f"vocabulary [0, {sp.vocab_size}): the token cache was built with a different "
                            "vocabulary; rebuild it (delete data.cache_dir)")
        is_target = np.stack([self._targets(ids[i], u[i], bool(reversed_[i])) for i in range(count)])
        is_func = (ids == sp.sep) | (ids == sp.cls)
        rank, threshold = attention_ranks(factorization_ranks(u[:, 4:4 + length], lay.reuse_len, self.cfg.perm_size),
                                          is_target, is_func)
        pos = np.arange(length)[None, :]
        first_sep = lay.reuse_len + a_len[:, None]
        segment = np.where(pos <= first_sep, 0, np.where(pos < length - 1, 1, 2)).astype(np.int32)
        out = {"input_ids": ids, "segment_ids": segment, "attn_rank": rank, "attn_threshold": threshold}
        out.update(target_features(ids, is_target, self.cfg.max_predictions_per_seq))
        out.update(input_q=is_target.astype(np.float32), is_next=is_next, is_reversed=reversed_,
                   example_id=np.arange(first_index, first_index + count, dtype=np.int64))
        return out

    def rows(self, first_index: int, count: int) -> dict[str, np.ndarray]:
        """Features (``feature_spec``) of the consecutive examples ``[first_index, first_index + count)``."""
        out = self.compact_rows(first_index, count)
        out["perm_mask"] = perm_mask(out.pop("attn_rank"), out.pop("attn_threshold"), self.layout.reuse_len)
        out["target_mapping"] = target_mapping(out["target_positions"], out["target_weights"], self.layout.seq_len)
        return out

    def local_batch(self, step: int, process_index: int, process_count: int,
                    compact: bool = False) -> dict[str, np.ndarray]:
        """This process's rows of global batch ``step`` (``compact``: as ``compact_rows``)."""
        rows = self.layout.global_batch // process_count
        first = step * self.layout.global_batch + process_index * rows
        return self.compact_rows(first, rows) if compact else self.rows(first, rows)


def _dense(batch: dict[str, tf.Tensor], reuse_len: int, length: int) -> dict[str, tf.Tensor]:
    """TensorFlow twin of ``PlmBatchBuilder.rows``' last step: perm_mask and target_mapping from compact rows."""
    out = dict(batch)
    blocked = np.zeros((length, length), dtype=bool)
    blocked[:reuse_len, reuse_len:] = True
    cannot = tf.less_equal(out.pop("attn_threshold")[:, :, None], out.pop("attn_rank")[:, None, :])
    out["perm_mask"] = tf.cast(tf.logical_or(cannot, tf.constant(blocked)[None]), tf.float32)
    where = tf.where(out["target_weights"] > 0, out["target_positions"], -1)
    out["target_mapping"] = tf.one_hot(where, length, dtype=tf.float32)
    return out


def _check_args(source: DocumentSource, special: SpecialIds, seed: int) -> None:
    nsp.check_seed(seed)
    max_id = getattr(source, "max_token_id", None)
    if max_id is not None and max_id >= special.vocab_size:
        raise DataError(f"the corpus holds token id {max_id}, outside the vocabulary [0, {special.vocab_size}): "
                        "it was tokenized with a different vocabulary; rebuild the token cache "
                        "(delete data.cache_dir)")


def plm_dataset(source: DocumentSource, special: SpecialIds, cfg: XlnetDataConfig, *, seed: int, start_index: int,
                global_batch: int, process_index: int = 0, process_count: int = 1,
                repeat: bool = True, rows: np.ndarray | None = None, grouped: bool = False) -> tf.data.Dataset:
    """This process's batches of XLNet permutation-LM features, from global example ``start_index`` on.

    Features ([rows] leading dim, rows = global_batch / process_count or ``len(rows)``; see ``feature_spec``):
    input_ids, segment_ids [rows, L] int32; perm_mask [rows, L, L] float32 (1: row i may not attend to j);
    target_mapping [rows, P, L] float32 one-hot; target_ids, target_positions [rows, P] int32 (ascending
    positions); target_weights [rows, P] float32; input_q [rows, L] float32 (1 at targets); is_next, is_reversed
    [rows] int32; example_id [rows] int64. ``repeat=False`` stops after pass 0. ``rows``: the rows of each global
    batch (ascending, e.g. a TPU host's several blocks) in place of share ``process_index`` of
    ``process_count``; ``grouped=True``: numpy builds ``steps_per_item`` consecutive local batches per call,
    and tf.data splits them before the dense masks are built (each element is one local batch).
    """
    _check_args(source, special, seed)
    builder = PlmBatchBuilder(source, special, cfg, seed=seed, global_batch=global_batch)
    spec = {k: v for k, v in feature_spec(None, cfg).items() if k not in ("perm_mask", "target_mapping")}
    spec["attn_rank"] = spec["attn_threshold"] = tf.TensorSpec([None, cfg.max_seq_length], tf.int32)
    ds = rows_dataset(builder.compact_rows, {k: v.dtype.as_numpy_dtype for k, v in spec.items()},
                      {k: tuple(v.shape[1:]) for k, v in spec.items()}, start_index=start_index,
                      global_batch=global_batch, process_index=process_index, process_count=process_count, rows=rows,
                      total_batches=None if repeat else builder.layout.steps_per_pass, grouped=grouped,
                      split=True)  # perm_mask is [rows, L, L]: expanded per local batch, not per 512 rows
    dense = tf.autograph.experimental.do_not_convert(lambda b: _dense(b, cfg.reuse_len, cfg.max_seq_length))
    return ds.map(dense, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(tf.data.AUTOTUNE)
