// Sequential updates in parts (model.sequential_parts = P > 1; sequential.h gives the order within a part).
// Included by rows_cpu.cc.
//
// The batch's packing blocks are split into P contiguous parts of the stream (part 0 a little shorter:
// PartStart), and the parts run side by side on the kernel's thread pool. Each part runs word2vec.c's / fastText's loop over its own centers from the tables as
// they were before the batch, seeing its own moves at once and the other parts' moves at the end of the batch:
//   * part 0 moves the tables in place;
//   * every later part first copies the rows it reads (`snap`, taken before any part moves a row), runs on a
//     working copy of them (`work`, its ids remapped to the copy's rows), and at the end adds its moves
//     (work - snap) to the tables, part after part.
// fastText's units come from the subword table (sequential.h): a later part remaps each distinct word it reads
// once, into a local table of its units' local rows, so the remapping costs the part's words, not its units.
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
  std::vector<int32_t> cen, ng, pt, pin;          // the part's ids, remapped
  // fastText: the words whose units the part reads, remapped to local words (map_word: word -> local word, -1
  // between calls), and the local subword table (`sub`, stride SeqBatch::sub_n) of their units' local rows
  std::vector<int32_t> map_word, word, sub, sub_len, live;
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

// fastText's words (the pairs' context words for CBOW, the centers with a live pair for skip-gram) remapped to
// local words; each new word's units are remapped to local input rows (`map_in`, `rows`) into the local table.
inline void RemapWords(const SeqBatch& s, int64_t vocab, PartScratch& sc) {
  const bool cbow = s.mode == 3;
  const int64_t n = cbow ? s.R * s.c : s.R;
  const int32_t* words = cbow ? s.pin : s.cen;
  sc.live.assign(n, 0);
  for (int64_t q = 0; q < s.R * s.c; ++q)
    if (s.pw[q] != 0.f) sc.live[cbow ? q : (q / (s.block * s.c)) * s.block + s.prow[q]] = 1;
  sc.map_word.resize(vocab, -1);
  sc.word.resize(n);
  sc.sub.clear();
  sc.sub_len.clear();
  std::vector<int32_t> seen;  // the part's words, in order of first use
  for (int64_t i = 0; i < n; ++i) {
    if (!sc.live[i]) {
      sc.word[i] = 0;
      continue;
    }
    int32_t& local = sc.map_word[words[i]];
    if (local < 0) {
      local = static_cast<int32_t>(seen.size());
      seen.push_back(words[i]);
    }
    sc.word[i] = local;
  }
  // their units' local rows, word after word; the map of the input table's rows is large (4 bytes a row) and
  // read at random, so its entries are prefetched a few units ahead
  constexpr int64_t kAhead = 16;
  const int64_t nw = static_cast<int64_t>(seen.size());
  sc.sub.assign(nw * s.sub_n, 0);
  sc.sub_len.resize(nw);
  std::vector<int32_t> flat;  // the units of every word, in order
  for (int64_t j = 0; j < nw; ++j) {
    const int32_t* units = s.sub + static_cast<int64_t>(seen[j]) * s.sub_n;
    sc.sub_len[j] = s.sub_len[seen[j]];
    flat.insert(flat.end(), units, units + sc.sub_len[j]);
  }
  const int64_t nu = static_cast<int64_t>(flat.size());
  for (int64_t j = 0, f = 0; j < nw; ++j) {
    int32_t* out = sc.sub.data() + j * s.sub_n;
    for (int32_t k = 0; k < sc.sub_len[j]; ++k, ++f) {
      if (f + kAhead < nu) __builtin_prefetch(sc.map_in.data() + flat[f + kAhead], 1);
      int32_t& slot = sc.map_in[flat[f]];
      if (slot < 0) {
        slot = static_cast<int32_t>(sc.in.ids.size());
        sc.in.ids.push_back(flat[f]);
      }
      out[k] = slot;
    }
  }
  for (int32_t w : seen) sc.map_word[w] = -1;
  if (sc.sub_len.empty()) {  // dead slots name local word 0
    sc.sub_len.push_back(0);
    sc.sub.resize(s.sub_n, 0);
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
  return s;
}

}  // namespace parts_detail

// The first block of part p of P over nb blocks (p = P: nb). Part 0 moves the tables in place and meets their
// rows cold, where a later part's rows were just copied: its centers cost about 5/4 of theirs (fastText CBOW on
// Gutenberg: 20 ms against 16.5 ms for equal halves), so it takes 4 blocks for each later part's 5.
inline int64_t PartStart(int64_t nb, int64_t P, int64_t p) {
  if (p == 0) return 0;
  return nb * (4 + 5 * (p - 1)) / (4 + 5 * (P - 1));
}

// One batch of sequential SGD in P parts (see above). `rows_in/out/hs`: the tables' row counts; `vocab`: the
// subword table's words (fastText). `parallel_for(n,
// f)` calls f(0..n-1), possibly on several threads, and returns when all are done.
template <class ParallelFor>
SeqResult SequentialPartsStep(const SeqBatch& b, int64_t P, float lr, float* IN, float* OUT, float* HS,
                              int64_t rows_in, int64_t rows_out, int64_t rows_hs, int64_t vocab,
                              std::vector<PartScratch>& scratch,
                              ParallelFor&& parallel_for) {
  using parts_detail::Remap;
  const int64_t nb = b.R / b.block, d = b.d;
  const int64_t per_neg = b.pair_negs ? b.c * b.K : b.K;
  if (static_cast<int64_t>(scratch.size()) < P - 1) scratch.resize(P - 1);
  std::vector<SeqBatch> part(P);
  for (int64_t p = 0; p < P; ++p)
    part[p] = parts_detail::Slice(b, PartStart(nb, P, p) * b.block, PartStart(nb, P, p + 1) * b.block);

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
    if (t == 0 && units_in) parts_detail::RemapWords(s, vocab, sc);
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
  constexpr int64_t kChunk = 2048, kAhead = 16;
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
      if (i + kAhead < ch.hi) Prefetch(ch.table + static_cast<int64_t>(ch.rows->ids[i + kAhead]) * d, d);
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
    if (b.mode >= 2) {
      (b.mode == 3 ? s.pin : s.cen) = sc.word.data();
      s.sub = sc.sub.data(), s.sub_len = sc.sub_len.data();
    }
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
        if (r + kAhead < ch.hi) Prefetch(ch.table + static_cast<int64_t>(ch.rows->ids[r + kAhead]) * d, d);
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
