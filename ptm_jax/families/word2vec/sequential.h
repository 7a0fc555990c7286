// Sequential updates (model.updates='sequential'): word2vec.c's and fastText's own order of SGD, one pair after
// another in stream order with every row updated in place before the next pair reads it (word2vec.c
// TrainModelThread and fastText's Model::update with one thread; gensim with one worker). Included by rows_cpu.cc.
//
// The batch layout is the batched kernel's packed pairs (families/word2vec/data.py): a row's pairs are the live
// slots of its block that name it, the rows in stream order. fastText's units are read from the vocabulary's
// subword table (SubwordTable: a word's own row, then its n-gram rows), as fastText's getSubwords does, so its
// sequential batches carry no unit slots (families/fasttext/data.py). Per row:
//   * mode 0, word2vec skip-gram: each pair's context row h = syn0[context] against the center's output row
//     (label 1), its negatives (the center's shared draws, or the pair's own) and its Huffman path; the target
//     rows move by -lr g h, then h by -lr neu1e (neu1e = sum_j g_j t_j);
//   * mode 1, word2vec CBOW: the weighted mean of the context rows against the same targets; each context row
//     then moves by -lr w neu1e (word2vec.c adds neu1e to every context row);
//   * mode 2, fastText skip-gram: the mean of the center's unit rows against each pair's context word and its
//     negatives (one equal to that word does not count); every unit row moves by -lr w grad after each pair
//     (summed over the center's pairs and applied once, with the mean kept in step: the same numbers);
//   * mode 3, fastText CBOW: the mean of the units of the context words (in pair order) against the center and
//     its negatives.
// g = d loss / d score of one target (the weights of the pair and of the target included). The targets of one
// pair are scored at their rows before that pair's moves (word2vec.c scores each after the previous one's move;
// the two differ only where a pair draws the same row twice). A pair whose score is not finite moves nothing
// and is counted (the step's loss turns non-finite too). There is no duplicate cap (a row used n times takes n small steps, as in word2vec.c).
// Single-threaded, so deterministic.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <utility>
#include <vector>

#include "rows_math.h"

namespace ptm_rows {

// The inputs of one sequential step (pointers into the FFI buffers; see rows_cpu.cc's RowsImpl for the layouts).
struct SeqBatch {
  int64_t mode = 0, R = 0, block = 1, c = 0, K = 0, D = 0, d = 0;
  bool pair_negs = false;
  const int32_t *cen = nullptr, *ng = nullptr, *pt = nullptr, *pin = nullptr, *prow = nullptr;
  const float *cw = nullptr, *nw = nullptr, *cd = nullptr, *pw_path = nullptr, *pw = nullptr;
  // fastText (modes 2, 3): word w's input units are sub[w * sub_n + i] for i < sub_len[w]; the words are the
  // centers (skip-gram) or the pairs' context words (CBOW)
  const int32_t *sub = nullptr, *sub_len = nullptr;
  int64_t sub_n = 0;
};

struct SeqResult {
  double loss = 0.0, sq_in = 0.0, sq_out = 0.0, sq_hs = 0.0;
  int64_t skipped = 0;  // pairs (skip-gram) or centers (CBOW) left out as not finite
};

namespace seq_detail {

// Scores h against the targets (rows_math.h ScoreAll, the losses added), then, if every score is finite, moves
// each target row by -lr g h and returns neu1e = sum_j g_j t_j (at the rows before their moves) in `err`, and,
// where `h_step` is not 0, also moves h by h_step x neu1e (skip-gram: h_step = -lr). One sweep over the dimension
// does all the moves, 8 floats at a time, so each row is read and written once. False: a score was not finite
// (the step's loss is then not finite either), nothing moved.
inline bool ScoreAndMove(float* h, const Targets& t, float scale, float lr, int64_t d, Loss* loss, float* err,
                         float h_step, std::vector<float>& g, SeqResult* res) {
  const int64_t n = t.size();
  g.resize(n);
  ScoreAll(h, t, scale, d, loss, g.data());
  for (int64_t j = 0; j < n; ++j)
    if (!std::isfinite(g[j])) return false;
  const double hh = SumSq(h, d);
  for (int64_t j = 0; j < n; ++j)
    (t.table[j] == 1 ? res->sq_out : res->sq_hs) += static_cast<double>(g[j]) * g[j] * hh;
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const V8 hv = Load8(h + i);
    V8 e = {};
    for (int64_t j = 0; j < n; ++j) {
      float* row = t.row[j] + i;
      const V8 rv = Load8(row);
      e += g[j] * rv;
      const V8 moved = rv - (lr * g[j]) * hv;
      std::memcpy(row, &moved, sizeof(moved));
    }
    std::memcpy(err + i, &e, sizeof(e));
    if (h_step != 0.f) {
      const V8 hn = hv + h_step * e;
      std::memcpy(h + i, &hn, sizeof(hn));
    }
  }
  for (; i < d; ++i) {
    const float hv = h[i];
    float e = 0.f;
    for (int64_t j = 0; j < n; ++j) {
      e += g[j] * t.row[j][i];
      t.row[j][i] -= lr * g[j] * hv;
    }
    err[i] = e;
    if (h_step != 0.f) h[i] = hv + h_step * e;
  }
  return true;
}

// The live slots of each row of one block, in slot order (a CSR over the block's rows).
struct RowSlots {
  std::vector<int64_t> start, slot;
  void Build(const int32_t* row_of, const float* w, int64_t lo, int64_t hi, int64_t block) {
    start.assign(block + 1, 0);
    for (int64_t q = lo; q < hi; ++q)
      if (w[q] != 0.f) ++start[row_of[q] + 1];
    for (int64_t r = 0; r < block; ++r) start[r + 1] += start[r];
    slot.resize(start[block]);
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t q = lo; q < hi; ++q)
      if (w[q] != 0.f) slot[fill[row_of[q]]++] = q;
  }
  int64_t Size(int64_t r) const { return start[r + 1] - start[r]; }
  const int64_t* Begin(int64_t r) const { return slot.data() + start[r]; }
};

// h += w row, 8 floats at a time. Axpy inlined into the loops over a hidden vector's rows let GCC vectorise across
// the rows with gathers instead: fastText CBOW's step took 25% longer.
inline void AddRow(float w, const float* row, float* h, int64_t d) {
  int64_t k = 0;
  for (; k + 8 <= d; k += 8) {
    const V8 sum = Load8(h + k) + w * Load8(row + k);
    std::memcpy(h + k, &sum, sizeof(sum));
  }
  for (; k < d; ++k) h[k] += w * row[k];
}

// h = the weighted mean of the rows `ids[q]` of IN over the slots q of one row (weights w[q]; divided by
// max(sum w, 1), the batched kernel's mean).
inline void MeanOf(const float* IN, const int32_t* ids, const float* w, const int64_t* q, int64_t n, int64_t d,
                   float* h) {
  std::fill(h, h + d, 0.f);
  float cnt = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    AddRow(w[q[i]], IN + static_cast<int64_t>(ids[q[i]]) * d, h, d);
    cnt += w[q[i]];
  }
  const float inv = 1.f / std::max(cnt, 1.f);
  for (int64_t i = 0; i < d; ++i) h[i] *= inv;
}

// h = the mean of the rows ids[0..n) of IN (fastText's computeHidden over a list of units).
inline void MeanOfUnits(const float* IN, const int32_t* ids, int64_t n, int64_t d, float* h) {
  std::fill(h, h + d, 0.f);
  for (int64_t i = 0; i < n; ++i) AddRow(1.f, IN + static_cast<int64_t>(ids[i]) * d, h, d);
  const float inv = 1.f / std::max(static_cast<float>(n), 1.f);
  for (int64_t i = 0; i < d; ++i) h[i] *= inv;
}

// The input units of row r of a fastText batch (module doc): the center's word's (mode 2; `live`: the center has
// a live pair) or, in pair order, those of each live pair's context word (mode 3), gathered into `buf`.
inline const int32_t* RowUnits(const SeqBatch& b, int64_t r, const int64_t* ps, int64_t np, std::vector<int32_t>& buf,
                               int64_t* n) {
  if (b.mode == 2) {
    const int64_t w = b.cen[r];
    *n = np ? b.sub_len[w] : 0;
    return b.sub + w * b.sub_n;
  }
  buf.clear();
  for (int64_t i = 0; i < np; ++i) {
    const int64_t w = b.pin[ps[i]];
    buf.insert(buf.end(), b.sub + w * b.sub_n, b.sub + w * b.sub_n + b.sub_len[w]);
  }
  *n = static_cast<int64_t>(buf.size());
  return buf.data();
}

}  // namespace seq_detail

// One batch of sequential SGD on the tables IN, OUT, HS (updated in place) at rate lr.
inline SeqResult SequentialStep(const SeqBatch& b, float lr, float* IN, float* OUT, float* HS) {
  using seq_detail::MeanOf;
  using seq_detail::RowUnits;
  SeqResult res;
  Loss loss;
  const int64_t d = b.d, c = b.c, K = b.K, D = b.D;
  Targets t;
  seq_detail::RowSlots pairs;
  std::vector<float> g, err(d), hid(d), acc(d);
  std::vector<int32_t> unit_buf, next_buf;  // fastText CBOW: this row's units and the next row's
  const int32_t* next_ids = nullptr;        // the next row's units, gathered while prefetching them
  int64_t next_n = 0;
  auto add_targets = [&](int64_t r, bool center) {  // [the center's output row,] shared negatives, path
    t.Clear();
    if (OUT) {
      if (center) t.Add(OUT + static_cast<int64_t>(b.cen[r]) * d, 1.f, 1.f, nullptr, 1);
      if (!b.pair_negs)
        for (int64_t k = 0; k < K; ++k)
          if (b.nw[r * K + k] != 0.f)
            t.Add(OUT + static_cast<int64_t>(b.ng[r * K + k]) * d, 0.f, b.nw[r * K + k], nullptr, 1);
    }
    for (int64_t j = 0; j < D; ++j)
      if (b.pw_path[r * D + j] != 0.f)
        t.Add(HS + static_cast<int64_t>(b.pt[r * D + j]) * d, 1.f - b.cd[r * D + j], b.pw_path[r * D + j], nullptr,
              2);
  };
  const bool units_in = b.mode >= 2;
  for (int64_t r0 = 0; r0 < b.R; r0 += b.block) {
    pairs.Build(b.prow, b.pw, r0 * c, (r0 + b.block) * c, b.block);
    for (int64_t r = r0; r < r0 + b.block; ++r) {
      const int64_t np = pairs.Size(r - r0);
      const int64_t* ps = pairs.Begin(r - r0);
      const int32_t* un = nullptr;  // fastText: this row's units (gathered at the previous row, within a block)
      int64_t nu = 0;
      if (units_in && r > r0) {
        std::swap(unit_buf, next_buf);  // the vectors' storage moves with them: next_ids stays valid
        un = next_ids, nu = next_n;
      } else if (units_in) {
        un = RowUnits(b, r, ps, np, unit_buf, &nu);
      }
      if (r + 1 < r0 + b.block) {  // the next center's input rows, while this one's are scored
        const int64_t nq = pairs.Size(r + 1 - r0);
        const int64_t* qs = pairs.Begin(r + 1 - r0);
        if (units_in) {
          next_ids = RowUnits(b, r + 1, qs, nq, next_buf, &next_n);
          for (int64_t i = 0; i < next_n; ++i) Prefetch(IN + static_cast<int64_t>(next_ids[i]) * d, d);
        } else {
          for (int64_t i = 0; i < nq; ++i) Prefetch(IN + static_cast<int64_t>(b.pin[qs[i]]) * d, d);
        }
        if (OUT && b.mode != 2) Prefetch(OUT + static_cast<int64_t>(b.cen[r + 1]) * d, d);
        for (int64_t k = 0; OUT && !b.pair_negs && k < K; ++k)
          if (b.nw[(r + 1) * K + k] != 0.f) Prefetch(OUT + static_cast<int64_t>(b.ng[(r + 1) * K + k]) * d, d);
      }
      if (b.mode == 0) {  // word2vec skip-gram: each pair's context row against the center's targets
        if (!np || b.cw[r] == 0.f) continue;
        add_targets(r, true);
        const size_t shared = t.row.size();
        for (int64_t i = 0; i < np; ++i) {
          const int64_t p = ps[i];
          t.Keep(shared);
          for (int64_t k = 0; b.pair_negs && OUT && k < K; ++k)
            if (b.nw[p * K + k] != 0.f)
              t.Add(OUT + static_cast<int64_t>(b.ng[p * K + k]) * d, 0.f, b.nw[p * K + k], nullptr, 1);
          float* h = IN + static_cast<int64_t>(b.pin[p]) * d;
          if (!seq_detail::ScoreAndMove(h, t, b.pw[p], lr, d, &loss, err.data(), -lr, g, &res)) {
            ++res.skipped;
            continue;
          }
          res.sq_in += SumSq(err.data(), d);
        }
      } else if (b.mode == 1) {  // word2vec CBOW: the weighted mean of the context rows against the center
        if (!np || b.cw[r] == 0.f) continue;
        MeanOf(IN, b.pin, b.pw, ps, np, d, hid.data());
        add_targets(r, true);
        if (!seq_detail::ScoreAndMove(hid.data(), t, b.cw[r], lr, d, &loss, err.data(), 0.f, g, &res)) {
          ++res.skipped;
          continue;
        }
        const double ee = SumSq(err.data(), d);  // each context row moves by -lr w neu1e (word2vec.c)
        for (int64_t i = 0; i < np; ++i) {
          Axpy(-lr * b.pw[ps[i]], err.data(), IN + static_cast<int64_t>(b.pin[ps[i]]) * d, d);
          res.sq_in += ee * b.pw[ps[i]] * b.pw[ps[i]];
        }
      } else if (b.mode == 2) {  // fastText skip-gram: the center's units against each pair's context word
        if (!np || !nu) continue;
        // The unit rows are read only through this center's hidden vector until its last pair, so their moves
        // are summed in `acc` and applied once at the end; the hidden vector moves with them by -lr kappa err,
        // kappa = sum_a (the times unit a's row occurs in the list) / n: the same numbers as moving every unit row
        // after every pair, to float rounding (tests/test_fasttext.py checks it against that loop).
        seq_detail::MeanOfUnits(IN, un, nu, d, hid.data());
        float kappa = 0.f;
        for (int64_t a = 0; a < nu; ++a)
          for (int64_t z = 0; z < nu; ++z) kappa += un[z] == un[a] ? 1.f : 0.f;
        kappa /= std::max(static_cast<float>(nu), 1.f);
        std::fill(acc.begin(), acc.end(), 0.f);
        bool moved = false;
        for (int64_t i = 0; i < np; ++i) {
          const int64_t p = ps[i];
          t.Clear();
          t.Add(OUT + static_cast<int64_t>(b.pin[p]) * d, 1.f, 1.f, nullptr, 1);
          for (int64_t k = 0; k < K; ++k) {  // a negative equal to the pair's target does not count
            const int64_t j = b.pair_negs ? p * K + k : r * K + k;
            const bool live = b.pair_negs ? b.nw[j] != 0.f : (b.nw[j] != 0.f && b.ng[j] != b.pin[p]);
            if (live) t.Add(OUT + static_cast<int64_t>(b.ng[j]) * d, 0.f, 1.f, nullptr, 1);
          }
          if (!seq_detail::ScoreAndMove(hid.data(), t, b.pw[p], lr, d, &loss, err.data(), 0.f, g, &res)) {
            ++res.skipped;
            continue;
          }
          Axpy(-lr * kappa, err.data(), hid.data(), d);
          Axpy(lr, err.data(), acc.data(), d);
          res.sq_in += SumSq(err.data(), d) * static_cast<double>(nu);
          moved = true;
        }
        for (int64_t a = 0; moved && a < nu; ++a) Axpy(-1.f, acc.data(), IN + static_cast<int64_t>(un[a]) * d, d);
      } else {  // fastText CBOW: the mean of the context words' units against the center
        if (!nu || b.cw[r] == 0.f) continue;
        seq_detail::MeanOfUnits(IN, un, nu, d, hid.data());
        add_targets(r, true);
        if (!seq_detail::ScoreAndMove(hid.data(), t, b.cw[r], lr, d, &loss, err.data(), 0.f, g, &res)) {
          ++res.skipped;
          continue;
        }
        const double ee = SumSq(err.data(), d);  // every unit row moves by -lr grad (fastText's Model::update)
        for (int64_t a = 0; a < nu; ++a) Axpy(-lr, err.data(), IN + static_cast<int64_t>(un[a]) * d, d);
        res.sq_in += ee * static_cast<double>(nu);
      }
    }
  }
  res.loss = loss.Total();
  return res;
}

}  // namespace ptm_rows
