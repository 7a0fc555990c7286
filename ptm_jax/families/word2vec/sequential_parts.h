// Sequential updates in parts (model.sequential_parts = P > 1; sequential.h gives the order within a part).
// Included by rows_cpu.cc.
//
// The batch's packing blocks are split into P contiguous parts of the stream, and the parts run side by side on
// the kernel's thread pool. Each part runs word2vec.c's / fastText's loop over its own centers from the tables as
// they were before the batch, seeing its own moves at once and the other parts' moves at the end of the batch:
//   * part 0 moves the tables in place;
//   * every later part first copies the rows it reads (`snap`, taken before any part moves a row), runs on a
//     working copy of them (`work`, its ids remapped to the copy's rows), and at the end adds its moves
//     (work - snap) to the tables, part after part.
// word2vec.c's and fastText's threads share one table without locks (Hogwild: a thread sees another's move
// whenever the write lands); here a part sees the others' moves always at the batch's end, so the result depends
// on P and the batch, never on the thread count or the timing: reruns and resumes are bit-equal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "sequential.h"

namespace ptm_rows {

// The rows of one table that one part reads: ids[i] is the table row of local row i.
struct PartRows {
  std::vector<int32_t> ids;
  std::vector<float> snap, work;  // [ids.size(), d]
};

// One later part's buffers (reused from call to call).
struct PartScratch {
  PartRows in, out, hs;
  std::vector<int32_t> map_in, map_out, map_hs;  // table row -> local row, -1 between calls
  std::vector<int32_t> cen, ng, pt, pin, un;      // the part's ids, remapped
};

namespace parts_detail {

// Remaps the ids with a nonzero weight into the part's local rows; the others become local row 0, which they
// never read (a dead slot's id is only prefetched).
inline void Remap(const int32_t* ids, const float* w, int64_t n, std::vector<int32_t>& map, PartRows& rows,
                  std::vector<int32_t>& out) {
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] == 0.f) {
      out[i] = 0;
      continue;
    }
    int32_t& slot = map[ids[i]];
    if (slot < 0) {
      slot = static_cast<int32_t>(rows.ids.size());
      rows.ids.push_back(ids[i]);
    }
    out[i] = slot;
  }
}

// The part's view of rows [a, b) of the batch: the same layouts, pointers offset to row a.
inline SeqBatch Slice(const SeqBatch& b, int64_t a, int64_t e) {
  SeqBatch s = b;
  const int64_t per_neg = b.pair_negs ? b.c * b.K : b.K;
  s.R = e - a;
  s.cen = b.cen + a, s.cw = b.cw + a;
  s.ng = b.ng + a * per_neg, s.nw = b.nw + a * per_neg;
  s.pt = b.pt + a * b.D, s.cd = b.cd + a * b.D, s.pw_path = b.pw_path + a * b.D;
  s.pin = b.pin + a * b.c, s.prow = b.prow + a * b.c, s.pw = b.pw + a * b.c;
  s.un = b.un + a * b.u, s.urow = b.urow + a * b.u, s.uw = b.uw + a * b.u;
  return s;
}

}  // namespace parts_detail

// One batch of sequential SGD in P parts (see above). `rows_in/out/hs`: the tables' row counts. `parallel_for(n,
// f)` calls f(0..n-1), possibly on several threads, and returns when all are done.
template <class ParallelFor>
SeqResult SequentialPartsStep(const SeqBatch& b, int64_t P, float lr, float* IN, float* OUT, float* HS,
                              int64_t rows_in, int64_t rows_out, int64_t rows_hs, std::vector<PartScratch>& scratch,
                              ParallelFor&& parallel_for) {
  using parts_detail::Remap;
  const int64_t nb = b.R / b.block, d = b.d;
  const int64_t per_neg = b.pair_negs ? b.c * b.K : b.K;
  if (static_cast<int64_t>(scratch.size()) < P - 1) scratch.resize(P - 1);
  std::vector<SeqBatch> part(P);
  for (int64_t p = 0; p < P; ++p)
    part[p] = parts_detail::Slice(b, (p * nb / P) * b.block, ((p + 1) * nb / P) * b.block);

  // 1. Each later part's ids, remapped (one item per part and table, each with its own map), then the copies of
  // its rows (chunks of rows over the threads); read-only on the tables.
  const bool units_in = b.mode >= 2;
  float* tables[3] = {IN, OUT, HS};
  parallel_for(3 * (P - 1), [&](int64_t item) {
    const SeqBatch& s = part[item / 3 + 1];
    PartScratch& sc = scratch[item / 3];
    const int64_t t = item % 3;
    if (!tables[t]) return;
    PartRows& rows = t == 0 ? sc.in : t == 1 ? sc.out : sc.hs;
    std::vector<int32_t>& map = t == 0 ? sc.map_in : t == 1 ? sc.map_out : sc.map_hs;
    map.resize(t == 0 ? rows_in : t == 1 ? rows_out : rows_hs, -1);
    rows.ids.clear();
    if (t == 0 && units_in) Remap(s.un, s.uw, s.R * b.u, map, rows, sc.un);
    if (t == 0 && !units_in) Remap(s.pin, s.pw, s.R * b.c, map, rows, sc.pin);
    if (t == 1 && b.mode != 2) Remap(s.cen, s.cw, s.R, map, rows, sc.cen);
    if (t == 1) Remap(s.ng, s.nw, s.R * per_neg, map, rows, sc.ng);
    if (t == 1 && b.mode == 2) Remap(s.pin, s.pw, s.R * b.c, map, rows, sc.pin);  // fastText skip-gram: outputs
    if (t == 2) Remap(s.pt, s.pw_path, s.R * b.D, map, rows, sc.pt);
    for (int32_t id : rows.ids) map[id] = -1;
    if (rows.ids.empty()) rows.ids.push_back(0);  // dead slots name local row 0
    rows.snap.resize(rows.ids.size() * d);
    rows.work.resize(rows.ids.size() * d);
  });
  constexpr int64_t kChunk = 2048;
  struct Chunk {
    PartRows* rows;
    float* table;
    int64_t lo, hi;
  };
  std::vector<Chunk> chunks;
  std::vector<int64_t> first_chunk(P, 0);  // part i + 1's chunks: [first_chunk[i], first_chunk[i + 1])
  for (int64_t i = 0; i < P - 1; ++i) {
    for (int64_t t = 0; t < 3; ++t) {
      if (!tables[t]) continue;
      PartRows& rows = t == 0 ? scratch[i].in : t == 1 ? scratch[i].out : scratch[i].hs;
      const int64_t n = static_cast<int64_t>(rows.ids.size());
      for (int64_t lo = 0; lo < n; lo += kChunk) chunks.push_back({&rows, tables[t], lo, std::min(n, lo + kChunk)});
    }
    first_chunk[i + 1] = static_cast<int64_t>(chunks.size());
  }
  parallel_for(static_cast<int64_t>(chunks.size()), [&](int64_t j) {
    const Chunk& ch = chunks[j];
    for (int64_t i = ch.lo; i < ch.hi; ++i) {
      const float* src = ch.table + static_cast<int64_t>(ch.rows->ids[i]) * d;
      std::memcpy(ch.rows->snap.data() + i * d, src, d * sizeof(float));
      std::memcpy(ch.rows->work.data() + i * d, src, d * sizeof(float));
    }
  });

  // 2. The parts' loops, side by side: part 0 on the tables, the others on their copies.
  std::vector<SeqResult> res(P);
  parallel_for(P, [&](int64_t p) {
    if (p == 0) {
      res[0] = SequentialStep(part[0], lr, IN, OUT, HS);
      return;
    }
    PartScratch& sc = scratch[p - 1];
    SeqBatch s = part[p];
    if (b.mode >= 2) s.un = sc.un.data();
    if (OUT) {
      if (b.mode != 2) s.cen = sc.cen.data();
      s.ng = sc.ng.data();
    }
    if (b.mode != 3) s.pin = sc.pin.data();
    if (HS) s.pt = sc.pt.data();
    res[p] = SequentialStep(s, lr, sc.in.work.data(), OUT ? sc.out.work.data() : nullptr,
                            HS ? sc.hs.work.data() : nullptr);
  });

  // 3. The later parts' moves, added part after part (a part's local rows are distinct table rows, so its chunks
  // may run on any thread).
  for (int64_t i = 0; i < P - 1; ++i)
    parallel_for(first_chunk[i + 1] - first_chunk[i], [&](int64_t j) {
      const Chunk& ch = chunks[first_chunk[i] + j];
      for (int64_t r = ch.lo; r < ch.hi; ++r) {
        float* row = ch.table + static_cast<int64_t>(ch.rows->ids[r]) * d;
        const float* w = ch.rows->work.data() + r * d;
        const float* s0 = ch.rows->snap.data() + r * d;
        for (int64_t k = 0; k < d; ++k) row[k] += w[k] - s0[k];
      }
    });
  SeqResult total;
  double loss = 0.0;
  for (const SeqResult& r : res) {
    loss += r.loss, total.sq_in += r.sq_in, total.sq_out += r.sq_out, total.sq_hs += r.sq_hs;
    total.skipped += r.skipped;
  }
  total.loss = loss;
  return total;
}

}  // namespace ptm_rows
