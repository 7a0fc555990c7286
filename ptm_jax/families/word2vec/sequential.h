// Sequential updates (model.updates='sequential'): word2vec.c's and fastText's own order of SGD, one pair after
// another in stream order with every row updated in place before the next pair reads it (word2vec.c
// TrainModelThread and fastText's Model::update with one thread; gensim with one worker). Included by rows_cpu.cc.
//
// The batch layout is the batched kernel's (families/word2vec/data.py's packed pairs, families/fasttext/data.py's
// units): a row's pairs and units are the live slots of its block that name it, the rows in stream order. Per row:
//   * mode 0, word2vec skip-gram: each pair's context row h = syn0[context] against the center's output row
//     (label 1), its negatives (the center's shared draws, or the pair's own) and its Huffman path; the target
//     rows move by -lr g h, then h by -lr neu1e (neu1e = sum_j g_j t_j);
//   * mode 1, word2vec CBOW: the weighted mean of the context rows against the same targets; each context row
//     then moves by -lr w neu1e (word2vec.c adds neu1e to every context row);
//   * mode 2, fastText skip-gram: the mean of the center's unit rows against each pair's context word and its
//     negatives (one equal to that word does not count); every unit row moves by -lr w grad after each pair
//     (summed over the center's pairs and applied once, with the mean kept in step: the same numbers);
//   * mode 3, fastText CBOW: the mean of the context words' units against the center and its negatives.
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
#include <vector>

#include "rows_math.h"

namespace ptm_rows {

// The inputs of one sequential step (pointers into the FFI buffers; see rows_cpu.cc's RowsImpl for the layouts).
struct SeqBatch {
  int64_t mode = 0, R = 0, block = 1, c = 0, K = 0, D = 0, d = 0;
  bool pair_negs = false;
  int64_t u = 0;  // unit slots per row (fastText)
  const int32_t *cen = nullptr, *ng = nullptr, *pt = nullptr, *pin = nullptr, *prow = nullptr, *un = nullptr,
                *urow = nullptr;
  const float *cw = nullptr, *nw = nullptr, *cd = nullptr, *pw_path = nullptr, *pw = nullptr, *uw = nullptr;
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

// The live slots of each row of one block, in slot order (a CSR over the block's rows): pair or unit slots.
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

// h = the weighted mean of the rows `ids[q]` of IN over the slots q of one row (weights w[q]; divided by
// max(sum w, 1), the batched kernel's mean).
inline void MeanOf(const float* IN, const int32_t* ids, const float* w, const int64_t* q, int64_t n, int64_t d,
                   float* h) {
  std::fill(h, h + d, 0.f);
  float cnt = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    Axpy(w[q[i]], IN + static_cast<int64_t>(ids[q[i]]) * d, h, d);
    cnt += w[q[i]];
  }
  const float inv = 1.f / std::max(cnt, 1.f);
  for (int64_t i = 0; i < d; ++i) h[i] *= inv;
}

}  // namespace seq_detail

// One batch of sequential SGD on the tables IN, OUT, HS (updated in place) at rate lr.
inline SeqResult SequentialStep(const SeqBatch& b, float lr, float* IN, float* OUT, float* HS) {
  using seq_detail::MeanOf;
  SeqResult res;
  Loss loss;
  const int64_t d = b.d, c = b.c, K = b.K, D = b.D, u = b.u;
  Targets t;
  seq_detail::RowSlots pairs, units;
  std::vector<float> g, err(d), hid(d), acc(d);
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
  // moves the rows averaged into a hidden vector by -lr w err each (word2vec.c's neu1e, fastText's grad)
  auto move_inputs = [&](const int32_t* ids, const float* w, const int64_t* q, int64_t n) {
    const double ee = SumSq(err.data(), d);
    for (int64_t i = 0; i < n; ++i) {
      Axpy(-lr * w[q[i]], err.data(), IN + static_cast<int64_t>(ids[q[i]]) * d, d);
      res.sq_in += ee * w[q[i]] * w[q[i]];
    }
  };
  const bool units_in = b.mode >= 2;
  for (int64_t r0 = 0; r0 < b.R; r0 += b.block) {
    pairs.Build(b.prow, b.pw, r0 * c, (r0 + b.block) * c, b.block);
    if (units_in) units.Build(b.urow, b.uw, r0 * u, (r0 + b.block) * u, b.block);
    for (int64_t r = r0; r < r0 + b.block; ++r) {
      const int64_t np = pairs.Size(r - r0);
      const int64_t* ps = pairs.Begin(r - r0);
      if (r + 1 < r0 + b.block) {  // the next center's input rows, while this one's are scored
        const int64_t nx = units_in ? units.Size(r + 1 - r0) : pairs.Size(r + 1 - r0);
        const int64_t* qs = units_in ? units.Begin(r + 1 - r0) : pairs.Begin(r + 1 - r0);
        for (int64_t i = 0; i < nx; ++i)
          Prefetch(IN + static_cast<int64_t>((units_in ? b.un : b.pin)[qs[i]]) * d, d);
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
      } else if (b.mode == 2) {  // fastText skip-gram: the center's units against each pair's context word
        const int64_t nu = units.Size(r - r0);
        const int64_t* qs = units.Begin(r - r0);
        if (!np || !nu) continue;
        // The unit rows are read only through this center's hidden vector until its last pair, so their moves
        // are summed in `acc` and applied once at the end; the hidden vector moves with them by -lr kappa err,
        // kappa = sum_q w_q (the weight of q's row over all its slots) / W: the same numbers as moving every unit
        // row after every pair, to float rounding (tests/test_fasttext.py checks it against that loop).
        MeanOf(IN, b.un, b.uw, qs, nu, d, hid.data());
        float wsum = 0.f, kappa = 0.f;
        for (int64_t a = 0; a < nu; ++a) {
          float same = 0.f;
          for (int64_t z = 0; z < nu; ++z)
            if (b.un[qs[z]] == b.un[qs[a]]) same += b.uw[qs[z]];
          kappa += b.uw[qs[a]] * same;
          wsum += b.uw[qs[a]];
        }
        kappa /= std::max(wsum, 1.f);
        double w2 = 0.0;
        for (int64_t a = 0; a < nu; ++a) w2 += static_cast<double>(b.uw[qs[a]]) * b.uw[qs[a]];
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
          res.sq_in += SumSq(err.data(), d) * w2;
          moved = true;
        }
        for (int64_t a = 0; moved && a < nu; ++a)
          Axpy(-b.uw[qs[a]], acc.data(), IN + static_cast<int64_t>(b.un[qs[a]]) * d, d);
      } else {  // CBOW: the mean of the context rows (word2vec) or of their units (fastText) against the center
        const int32_t* ids = units_in ? b.un : b.pin;
        const float* w = units_in ? b.uw : b.pw;
        const int64_t n = units_in ? units.Size(r - r0) : np;
        const int64_t* qs = units_in ? units.Begin(r - r0) : ps;
        if (!n || b.cw[r] == 0.f) continue;
        MeanOf(IN, ids, w, qs, n, d, hid.data());
        add_targets(r, true);
        if (!seq_detail::ScoreAndMove(hid.data(), t, b.cw[r], lr, d, &loss, err.data(), 0.f, g, &res)) {
          ++res.skipped;
          continue;
        }
        move_inputs(ids, w, qs, n);
      }
    }
  }
  res.loss = loss.Total();
  return res;
}

}  // namespace ptm_rows
