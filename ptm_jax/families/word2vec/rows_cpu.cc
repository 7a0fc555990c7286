// The fused sparse SGD step of word2vec and fastText on the CPU, an XLA FFI custom call
// (ptm_jax/families/word2vec/cpu_kernel.py builds and registers it; docs/benchmarks.md "word2vec").
//
// One call does what the XLA path of the sparse step does in five passes over [rows, slots, dim] arrays
// (gather the rows, score the pairs, sigmoid, the gradient of each row read, scatter-add -lr x it), with the
// SAME batch semantics, so the two agree to float rounding (tests/test_word2vec.py, tests/test_fasttext.py):
//
//   * every gradient is taken at the tables as they were before the batch (phase 1 reads, phase 2 writes);
//   * a row read n > cap times by the batch's live reads (weight != 0) gets its summed update scaled by cap / n
//     (model.duplicate_cap; train/step.py capped_row_gradients);
//   * a non-finite loss or gradient norm leaves the tables unchanged (train/step.py sparse_sgd_step);
//   * hidden vectors that are means (CBOW, fastText's units) give each of their rows the whole error
//     (word2vec.c adds neu1e to every context row; fastText's Model::update likewise).
//
// Modes (the layouts are families/word2vec/data.py's packed pairs and families/fasttext/data.py's units):
//   0 word2vec skip-gram: each pair's context row predicts its center (+ negatives, + Huffman path);
//   1 word2vec CBOW: the mean of a center's context rows predicts it;
//   2 fastText skip-gram: the mean of the center's unit rows predicts each context word (+ negatives, shared
//     by the center's pairs or drawn per pair);
//   3 fastText CBOW: the mean of the units of the center's context words predicts the center.
//
// Deterministic, and independent of the thread count: phase 1 works block by block (a block's pairs and units
// name rows of that block only) and sums the loss per block, then in block order; phase 2 gives each thread
// the rows with id % kParts == part and applies every row's updates in read order.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "rows_math.h"
#include "sequential.h"
#include "sequential_parts.h"
#include "subword_tables.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;
using namespace ptm_rows;  // NOLINT: the kernel's own arithmetic (rows_math.h)

namespace {

constexpr int kParts = 16;  // phase 2 partitions of the row ids (fixed: results do not depend on threads)

// f(i) for i in [0, n): the items are claimed from a shared counter by the caller and by pool threads; the
// caller returns when every item is done (a pool thread that starts later finds none left).
void ParallelFor(ffi::ThreadPool& pool, int64_t n, const std::function<void(int64_t)>& f) {
  int64_t threads = pool.num_threads();
  if (n <= 1 || threads <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  struct State {
    std::atomic<int64_t> next{0};
    int64_t done = 0;
    std::mutex mu;
    std::condition_variable cv;
  };
  auto st = std::make_shared<State>();
  const std::function<void(int64_t)>* fp = &f;
  auto work = [st, n, fp]() {
    int64_t mine = 0;
    for (int64_t i; (i = st->next.fetch_add(1)) < n;) {
      (*fp)(i);
      ++mine;
    }
    if (mine) {
      std::lock_guard<std::mutex> lock(st->mu);
      st->done += mine;
      if (st->done == n) st->cv.notify_all();
    }
  };
  for (int64_t t = 0; t < std::min<int64_t>(threads, n) - 1; ++t) {
    auto task = work;
    pool.Schedule(std::move(task));
  }
  work();
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->done == n; });
}

// The reads of one table: ids, liveness weights, and where each read's gradient row is: its own row of `grad`
// (stride d), or coef[i] * vec[row(i)] (a scalar times a hidden vector or its error: the rows averaged into a
// mean receive its whole error times their weight, a target row receives d loss / d score times the hidden
// vector), row(i) = (i / per_block) * block + row_of[i] (pair and unit slots, block-relative) or i / per_row.
struct Reads {
  const int32_t* ids = nullptr;
  const float* live = nullptr;
  int64_t n = 0;
  float* grad = nullptr;            // [n, d] or null
  const float* vec = nullptr;       // [R, d]
  const float* coef = nullptr;      // [n]
  const int32_t* row_of = nullptr;
  int64_t per_block = 0, block = 0, per_row = 1;
  const double* vec_sq = nullptr;   // [R] squared norms of vec's rows (filled per block in phase 1)
  const float* updates = nullptr;   // [n] pair updates summed in each read, for the duplicate cap (null: 1 each)

  int64_t Row(int64_t i) const { return row_of ? (i / per_block) * block + row_of[i] : i / per_row; }
  const float* VecRow(int64_t i, int64_t d) const { return vec + Row(i) * d; }
};

struct Counts {
  std::vector<int32_t> n;
  void Count(const Reads& r) {
    for (int64_t i = 0; i < r.n; ++i)
      if (r.live[i] != 0.f) n[r.ids[i]] += r.updates ? static_cast<int32_t>(r.updates[i]) : 1;
  }
  void Clear(const Reads& r) {
    for (int64_t i = 0; i < r.n; ++i) n[r.ids[i]] = 0;
  }
  float Scale(int32_t id, float cap) const {
    return cap > 0.f ? std::min(1.f, cap / static_cast<float>(std::max(n[id], 1))) : 1.f;
  }
};

Counts& CountsFor(int which, int64_t rows) {
  static thread_local Counts counts[3];
  Counts& c = counts[which];
  if (static_cast<int64_t>(c.n.size()) < rows) c.n.assign(rows, 0);
  return c;
}

// Reused buffers (growing, never shrunk or zeroed whole: phase 1 zeroes the rows it accumulates into), one set
// per concurrent call.
struct Scratch {
  std::vector<float> g_in, g_out, g_pneg, g_hs, hid, err, c_out, c_ctx, c_pneg, c_hs, out_live;
  std::vector<int32_t> pneg_row;
  std::vector<double> hid_sq, err_sq;
  std::vector<float> unit_updates;
  std::vector<int32_t> out_ids;
  std::vector<int64_t> order;
  std::vector<PartScratch> parts;  // sequential updates in parts (sequential_parts.h)
};

template <class T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

class ScratchLease {
 public:
  ScratchLease() {
    std::lock_guard<std::mutex> lock(Mu());
    if (!Free().empty()) {
      s_ = std::move(Free().back());
      Free().pop_back();
    } else {
      s_ = std::make_unique<Scratch>();
    }
  }
  ~ScratchLease() {
    std::lock_guard<std::mutex> lock(Mu());
    Free().push_back(std::move(s_));
  }
  Scratch& operator*() { return *s_; }

 private:
  static std::mutex& Mu() {
    static std::mutex mu;
    return mu;
  }
  static std::vector<std::unique_ptr<Scratch>>& Free() {
    static std::vector<std::unique_ptr<Scratch>> free;
    return free;
  }
  std::unique_ptr<Scratch> s_;
};

// Phase 2 for one table: table[id] -= lr * scale(id) * gradient of each live read, in read order per row. The
// live reads are first bucketed by id % kParts (a stable counting pass), then each part applies its own.
void Apply(ffi::ThreadPool& pool, const Reads& r, const Counts& c, float cap, float lr, float* table, int64_t d,
           std::vector<int64_t>& order) {
  if (r.n == 0) return;
  int64_t start[kParts + 1] = {0};
  for (int64_t i = 0; i < r.n; ++i)
    if (r.live[i] != 0.f) ++start[r.ids[i] % kParts + 1];
  for (int p = 0; p < kParts; ++p) start[p + 1] += start[p];
  order.resize(start[kParts]);
  int64_t fill[kParts];
  std::copy(start, start + kParts, fill);
  for (int64_t i = 0; i < r.n; ++i)
    if (r.live[i] != 0.f) order[fill[r.ids[i] % kParts]++] = i;
  ParallelFor(pool, kParts, [&](int64_t part) {
    constexpr int64_t kAhead = 4;
    for (int64_t o = start[part]; o < start[part + 1]; ++o) {
      if (o + kAhead < start[part + 1]) {
        const int64_t a = order[o + kAhead];
        Prefetch(table + static_cast<int64_t>(r.ids[a]) * d, d);
        Prefetch(r.grad ? r.grad + a * d : r.VecRow(a, d), d);
      }
      const int64_t i = order[o];
      const int32_t id = r.ids[i];
      const float step = -lr * c.Scale(id, cap);
      float* row = table + static_cast<int64_t>(id) * d;
      if (r.grad) {
        Axpy(step, r.grad + i * d, row, d);
      } else {
        Axpy(step * r.coef[i], r.VecRow(i, d), row, d);
      }
    }
  });
}

// The capped squared norm of one block's reads [lo, hi) (the XLA path's grad_norm/<table>).
double BlockSumSq(const Reads& r, const Counts& c, float cap, int64_t lo, int64_t hi, int64_t d) {
  double s = 0.0;
  for (int64_t i = lo; i < hi; ++i) {
    if (r.live[i] == 0.f) continue;
    float scale = c.Scale(r.ids[i], cap);
    if (r.grad) {
      s += SumSq(r.grad + i * d, d) * scale * scale;
    } else {
      const float w = r.coef[i] * scale;
      s += r.vec_sq[r.Row(i)] * w * w;
    }
  }
  return s;
}

ffi::Error RowsImpl(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> in_tab, ffi::Buffer<ffi::F32> out_tab,
                    ffi::Buffer<ffi::F32> hs_tab, ffi::Buffer<ffi::S32> center, ffi::Buffer<ffi::F32> center_w,
                    ffi::Buffer<ffi::S32> neg, ffi::Buffer<ffi::F32> neg_w, ffi::Buffer<ffi::S32> path,
                    ffi::Buffer<ffi::F32> code, ffi::Buffer<ffi::F32> path_w, ffi::Buffer<ffi::S32> pair_in,
                    ffi::Buffer<ffi::S32> pair_row, ffi::Buffer<ffi::F32> pair_w, ffi::Buffer<ffi::S32> units,
                    ffi::Buffer<ffi::S32> unit_row, ffi::Buffer<ffi::F32> unit_w, ffi::Buffer<ffi::F32> lr_buf,
                    int64_t mode, int64_t block, float cap, bool has_out, bool has_hs, bool sequential,
                    int64_t parts, int64_t subwords, ffi::ResultBuffer<ffi::F32> in_res,
                    ffi::ResultBuffer<ffi::F32> out_res, ffi::ResultBuffer<ffi::F32> hs_res,
                    ffi::ResultBuffer<ffi::F32> stats) {
  // The results alias the tables (input_output_aliases): read and write them there.
  float* IN = in_res->typed_data();
  float* OUT = out_res->typed_data();
  float* HS = hs_res->typed_data();
  const int64_t d = in_tab.dimensions()[1];
  const int64_t R = center.dimensions()[0];
  const int64_t c = pair_in.dimensions()[1];
  const int64_t u = units.dimensions()[1];
  const bool pair_negs = neg.dimensions().size() == 3;  // skip-gram (modes 0, 2): a draw per pair slot
  const int64_t K = has_out ? neg.dimensions()[neg.dimensions().size() - 1] : 0;
  const int64_t D = has_hs ? path.dimensions()[1] : 0;
  if (block <= 0 || R % block != 0) return ffi::Error::InvalidArgument("rows are not whole packing blocks");
  if (mode < 0 || mode > 3) return ffi::Error::InvalidArgument("unknown mode");
  if (pair_negs && mode != 0 && mode != 2) return ffi::Error::InvalidArgument("per-pair negatives need skip-gram");
  const int64_t nb = R / block;
  const bool units_in = mode >= 2;  // fastText: the hidden vector is the mean of unit rows
  const bool per_pair = mode == 0;  // word2vec skip-gram: a hidden vector per pair slot
  const int32_t* cen = center.typed_data();
  const float* cw = center_w.typed_data();
  const int32_t* ng = neg.typed_data();
  const float* nw = neg_w.typed_data();
  const int32_t* pt = path.typed_data();
  const float* cd = code.typed_data();
  const float* pw_path = path_w.typed_data();
  const int32_t* pin = pair_in.typed_data();
  const int32_t* prow = pair_row.typed_data();
  const float* pw = pair_w.typed_data();
  const int32_t* un = units.typed_data();
  const int32_t* urow = unit_row.typed_data();
  const float* uw = unit_w.typed_data();
  const float lr = lr_buf.typed_data()[0];

  if (sequential) {  // word2vec.c's and fastText's order of updates (sequential.h)
    SeqBatch sb;
    sb.mode = mode, sb.R = R, sb.block = block, sb.c = c, sb.K = K, sb.D = D, sb.d = d, sb.pair_negs = pair_negs;
    sb.cen = cen, sb.ng = ng, sb.pt = pt, sb.pin = pin, sb.prow = prow;
    sb.cw = cw, sb.nw = nw, sb.cd = cd, sb.pw_path = pw_path, sb.pw = pw;
    std::shared_ptr<const SubwordTable> table;
    if (units_in) {  // fastText: the units come from the vocabulary's subword table
      table = FindTable(subwords);
      if (!table)
        return ffi::Error::InvalidArgument(
            "fastText's sequential updates read the units from the vocabulary's subword table, and none is "
            "registered under this step's key (cpu_kernel.register_subwords)");
      sb.sub = table->ids.data(), sb.sub_len = table->lengths.data(), sb.sub_n = table->width;
    }
    float* out = has_out ? OUT : nullptr;
    float* hs = has_hs ? HS : nullptr;
    SeqResult res;
    if (parts <= 1) {
      res = SequentialStep(sb, lr, IN, out, hs);
    } else {
      ScratchLease lease;
      res = SequentialPartsStep(sb, parts, lr, IN, out, hs, in_tab.dimensions()[0], out_tab.dimensions()[0],
                                hs_tab.dimensions()[0], table ? static_cast<int64_t>(table->lengths.size()) : 0,
                                (*lease).parts,
                                [&](int64_t n, const std::function<void(int64_t)>& f) { ParallelFor(pool, n, f); });
    }
    float* st = stats->typed_data();
    st[0] = static_cast<float>(res.loss);
    st[1] = static_cast<float>(res.sq_in);
    st[2] = static_cast<float>(res.sq_out);
    st[3] = static_cast<float>(res.sq_hs);
    st[4] = res.skipped == 0 ? 1.f : 0.f;
    return ffi::Error::Success();
  }

  // Gradient rows. Skip-gram (mode 0) keeps a buffer row per read: a pair's input row, a center's output and
  // path rows summed over its pairs. The other modes have one hidden vector per center, so a read's gradient is
  // a scalar times that vector or its error (Reads::coef): only the scalars are stored.
  // per-center output reads: [the center (word2vec),] the shared negatives (unless drawn per pair)
  const int64_t t_rows = (mode == 2 ? 0 : 1) + (pair_negs ? 0 : K);
  ScratchLease lease;
  Scratch& sc = *lease;
  const int64_t n_out_rows = has_out ? R * t_rows : 0;
  float* g_in = per_pair ? Grow(sc.g_in, R * c * d) : nullptr;
  float* g_out = per_pair && has_out ? Grow(sc.g_out, n_out_rows * d) : nullptr;
  float* g_pneg = pair_negs && per_pair ? Grow(sc.g_pneg, R * c * K * d) : nullptr;
  float* c_pneg = pair_negs && !per_pair ? Grow(sc.c_pneg, R * c * K) : nullptr;  // fastText's, per pair
  float* g_hs = per_pair && has_hs ? Grow(sc.g_hs, R * D * d) : nullptr;
  float* hid = per_pair ? nullptr : Grow(sc.hid, R * d);
  float* err = per_pair ? nullptr : Grow(sc.err, R * d);
  double* hid_sq = per_pair ? nullptr : Grow(sc.hid_sq, R);
  double* err_sq = per_pair ? nullptr : Grow(sc.err_sq, R);
  float* c_out = !per_pair && has_out ? Grow(sc.c_out, n_out_rows) : nullptr;
  float* c_ctx = mode == 2 ? Grow(sc.c_ctx, R * c) : nullptr;   // fastText skip-gram: each context word's
  float* c_hs = !per_pair && has_hs ? Grow(sc.c_hs, R * D) : nullptr;
  // The per-center output reads, in read order (center first, then negatives) with their live weights.
  float* out_live = Grow(sc.out_live, n_out_rows);
  int32_t* out_ids = Grow(sc.out_ids, n_out_rows);
  for (int64_t r = 0; r < R && has_out; ++r) {
    int64_t o = r * t_rows, k0 = 0;
    if (mode != 2) {
      out_ids[o] = cen[r];
      out_live[o] = cw[r];
      k0 = 1;
    }
    if (!pair_negs)
      for (int64_t k = 0; k < K; ++k) {
        out_ids[o + k0 + k] = ng[r * K + k];
        out_live[o + k0 + k] = nw[r * K + k];
      }
  }

  // fastText skip-gram: a unit read sums the updates of its center's pairs, a negative read those of the pairs
  // it serves (its weight): the duplicate cap counts pair updates (fastText's model.duplicate_cap).
  float* unit_upd = nullptr;
  if (mode == 2) {
    std::vector<float> pairs_of(R, 0.f);
    for (int64_t p = 0; p < R * c; ++p)
      if (pw[p] != 0.f) pairs_of[(p / (block * c)) * block + prow[p]] += 1.f;
    unit_upd = Grow(sc.unit_updates, R * u);
    for (int64_t q = 0; q < R * u; ++q) unit_upd[q] = pairs_of[(q / (block * u)) * block + urow[q]];
  }

  // The read lists of the three tables (the XLA path's model.row_ids).
  std::vector<Reads> in_reads(1), out_reads, hs_reads;
  if (per_pair) {
    in_reads[0] = Reads{pin, pw, R * c, g_in};
  } else if (units_in) {
    in_reads[0] = Reads{un, uw, R * u, nullptr, err, uw, urow, block * u, block, 1, err_sq, unit_upd};
  } else {
    in_reads[0] = Reads{pin, pw, R * c, nullptr, err, pw, prow, block * c, block, 1, err_sq};
  }
  if (has_out) {
    if (mode == 2) out_reads.push_back(Reads{pin, pw, R * c, nullptr, hid, c_ctx, prow, block * c, block, 1, hid_sq});
    if (per_pair) {
      out_reads.push_back(Reads{out_ids, out_live, n_out_rows, g_out});
    } else {
      out_reads.push_back(Reads{out_ids, out_live, n_out_rows, nullptr, hid, c_out, nullptr, 0, 0, t_rows, hid_sq,
                                mode == 2 ? out_live : nullptr});
    }
    if (pair_negs && per_pair) out_reads.push_back(Reads{ng, nw, R * c * K, g_pneg});
    if (pair_negs && !per_pair) {  // fastText skip-gram: a pair's negative row gets coef x its center's hidden
      int32_t* rows_of = Grow(sc.pneg_row, R * c * K);
      for (int64_t i = 0; i < R * c * K; ++i) rows_of[i] = prow[i / K];
      out_reads.push_back(Reads{ng, nw, R * c * K, nullptr, hid, c_pneg, rows_of, block * c * K, block, 1, hid_sq});
    }
  }
  if (has_hs) {
    if (per_pair) {
      hs_reads.push_back(Reads{pt, pw_path, R * D, g_hs});
    } else {
      hs_reads.push_back(Reads{pt, pw_path, R * D, nullptr, hid, c_hs, nullptr, 0, 0, D, hid_sq});
    }
  }

  // Phase 0: live reads per row id (the duplicate cap).
  Counts& n_in = CountsFor(0, in_tab.dimensions()[0]);
  Counts& n_out = CountsFor(1, out_tab.dimensions()[0]);
  Counts& n_hs = CountsFor(2, hs_tab.dimensions()[0]);
  for (auto& r : in_reads) n_in.Count(r);
  for (auto& r : out_reads) n_out.Count(r);
  for (auto& r : hs_reads) n_hs.Count(r);

  // Phase 1: per block, the loss and the gradient of every read, at the tables before the batch.
  std::vector<double> loss(nb, 0.0), sq_in(nb, 0.0), sq_out(nb, 0.0), sq_hs(nb, 0.0);
  ParallelFor(pool, nb, [&](int64_t b) {
    const int64_t r0 = b * block, r1 = r0 + block;
    Loss l;
    if (per_pair) {
      // A center's pairs are consecutive in its block's slots (stream order). Per center: its shared targets
      // (the center's output row, its negatives unless they are drawn per pair, its Huffman path) scored
      // against each pair's input row; each pair's input gradient and each target's gradient row are then
      // summed in one pass (Combine). An active center left without pairs (its block overflowed) gets zeros.
      Targets t;
      std::vector<const float*> hp;
      std::vector<float> g;
      std::vector<int64_t> ps;
      int64_t q = r0;  // the next center whose output and path gradient rows are not yet set
      auto zero_center = [&](int64_t r) {
        if (cw[r] == 0.f) return;
        if (g_out) std::memset(g_out + r * t_rows * d, 0, sizeof(float) * t_rows * d);
        if (g_hs) std::memset(g_hs + r * D * d, 0, sizeof(float) * D * d);
      };
      const int64_t end = r1 * c;
      for (int64_t p = r0 * c; p < end;) {
        if (pw[p] == 0.f) {
          ++p;
          continue;
        }
        const int64_t r = r0 + prow[p];
        ps.clear();
        for (; p < end && (pw[p] == 0.f || r0 + prow[p] == r); ++p)
          if (pw[p] != 0.f) ps.push_back(p);
        for (; q < r; ++q) zero_center(q);
        q = r + 1;
        t.Clear();
        if (has_out) {
          float* go = g_out + r * t_rows * d;
          t.Add(OUT + static_cast<int64_t>(cen[r]) * d, 1.f, 1.f, go);
          if (!pair_negs)
            for (int64_t k = 0; k < K; ++k)
              t.Add(OUT + static_cast<int64_t>(ng[r * K + k]) * d, 0.f, nw[r * K + k], go + (1 + k) * d);
        }
        for (int64_t j = 0; j < D; ++j)
          t.Add(HS + static_cast<int64_t>(pt[r * D + j]) * d, 1.f - cd[r * D + j], pw_path[r * D + j],
                g_hs + (r * D + j) * d);
        // the next center's rows, while this one's are scored
        for (int64_t i = p; i < std::min(p + c, end); ++i)
          if (pw[i] != 0.f) Prefetch(IN + static_cast<int64_t>(pin[i]) * d, d);
        if (has_out && r + 1 < r1) {
          Prefetch(OUT + static_cast<int64_t>(cen[r + 1]) * d, d);
          for (int64_t k = 0; !pair_negs && k < K; ++k)
            Prefetch(OUT + static_cast<int64_t>(ng[(r + 1) * K + k]) * d, d);
        }
        const int64_t n = t.size(), P = static_cast<int64_t>(ps.size());
        hp.resize(P);
        g.resize(P * n);
        for (int64_t i = 0; i < P; ++i) {
          const int64_t pp = ps[i];
          const float* h = IN + static_cast<int64_t>(pin[pp]) * d;
          hp[i] = h;
          float* e = g_in + pp * d;
          ScoreAll(h, t, pw[pp], d, &l, g.data() + i * n);
          Combine(t.row.data(), g.data() + i * n, n, e, d, true);
          for (int64_t k = 0; pair_negs && k < K; ++k) {
            const int64_t j = pp * K + k;
            const float w = pw[pp] * nw[j];
            if (w == 0.f) continue;
            Score(h, OUT + static_cast<int64_t>(ng[j]) * d, 0.f, w, d, &l, e, g_pneg + j * d, false, true);
          }
          const float scale = n_in.Scale(pin[pp], cap);
          sq_in[b] += SumSq(e, d) * scale * scale;
        }
        for (int64_t j = 0; j < n; ++j) Combine(hp.data(), g.data() + j, P, t.grad[j], d, true, n);
      }
      for (; q < r1; ++q) zero_center(q);
    } else {
      // the hidden vectors: the weighted mean of the rows averaged into each center's
      std::memset(hid + r0 * d, 0, sizeof(float) * block * d);
      std::memset(err + r0 * d, 0, sizeof(float) * block * d);
      std::vector<float> cnt(block, 0.f);
      const int32_t* ids = units_in ? un : pin;
      const int32_t* rows = units_in ? urow : prow;
      const float* ws = units_in ? uw : pw;
      const int64_t per = units_in ? u : c;
      constexpr int64_t kAhead = 8;
      for (int64_t q = r0 * per; q < r1 * per; ++q) {
        if (q + kAhead < r1 * per && ws[q + kAhead] != 0.f) Prefetch(IN + static_cast<int64_t>(ids[q + kAhead]) * d, d);
        if (ws[q] == 0.f) continue;
        const int64_t r = r0 + rows[q];
        Axpy(ws[q], IN + static_cast<int64_t>(ids[q]) * d, hid + r * d, d);
        cnt[rows[q]] += ws[q];
      }
      for (int64_t r = r0; r < r1; ++r) {
        const float k = std::max(cnt[r - r0], 1.f);
        for (int64_t i = 0; i < d; ++i) hid[r * d + i] /= k;
      }
      if (mode == 2) {  // fastText skip-gram: each pair's context word is a positive target of its center
        for (int64_t p = r0 * c; p < r1 * c; ++p) {
          if (pw[p] == 0.f) continue;
          const int64_t r = r0 + prow[p];
          c_ctx[p] = Score(hid + r * d, OUT + static_cast<int64_t>(pin[p]) * d, 1.f, pw[p], d, &l, err + r * d,
                           nullptr);
          for (int64_t k = 0; pair_negs && k < K; ++k) {  // its own negatives, drawn per pair
            const int64_t j = p * K + k;
            const float w = pw[p] * nw[j];
            c_pneg[j] = w == 0.f ? 0.f
                                 : Score(hid + r * d, OUT + static_cast<int64_t>(ng[j]) * d, 0.f, w, d, &l,
                                         err + r * d, nullptr);
          }
        }
      }
      Targets t;
      std::vector<float> g;
      for (int64_t r = r0; r < r1; ++r) {
        const float wc = mode == 2 ? 1.f : cw[r];
        if (wc == 0.f) continue;
        if (has_out && r + 1 < r1) {  // the next center's output rows, while this one's are scored
          if (mode != 2) Prefetch(OUT + static_cast<int64_t>(cen[r + 1]) * d, d);
          for (int64_t k = 0; !pair_negs && k < K; ++k)
            Prefetch(OUT + static_cast<int64_t>(ng[(r + 1) * K + k]) * d, d);
        }
        t.Clear();
        if (has_out) {
          if (mode != 2) t.Add(OUT + static_cast<int64_t>(cen[r]) * d, 1.f, 1.f);
          for (int64_t k = 0; !pair_negs && k < K; ++k)
            t.Add(OUT + static_cast<int64_t>(ng[r * K + k]) * d, 0.f, nw[r * K + k]);
        }
        for (int64_t j = 0; j < D; ++j)
          t.Add(HS + static_cast<int64_t>(pt[r * D + j]) * d, 1.f - cd[r * D + j], pw_path[r * D + j]);
        g.resize(t.size());
        ScoreAll(hid + r * d, t, wc, d, &l, g.data());
        if (has_out) std::copy(g.begin(), g.begin() + t_rows, c_out + r * t_rows);
        if (D) std::copy(g.end() - D, g.end(), c_hs + r * D);
        Combine(t.row.data(), g.data(), t.size(), err + r * d, d, false);
      }
      for (int64_t r = r0; r < r1; ++r) {
        hid_sq[r] = SumSq(hid + r * d, d);
        err_sq[r] = SumSq(err + r * d, d);
      }
      for (auto& r : in_reads) sq_in[b] += BlockSumSq(r, n_in, cap, b * r.n / nb, (b + 1) * r.n / nb, d);
    }
    loss[b] = l.Total();
    // the capped squared norms of the block's output and path reads (complete now)
    for (auto& r : out_reads) sq_out[b] += BlockSumSq(r, n_out, cap, b * r.n / nb, (b + 1) * r.n / nb, d);
    for (auto& r : hs_reads) sq_hs[b] += BlockSumSq(r, n_hs, cap, b * r.n / nb, (b + 1) * r.n / nb, d);
  });
  double total = 0.0, s_in = 0.0, s_out = 0.0, s_hs = 0.0;
  for (int64_t b = 0; b < nb; ++b) {
    total += loss[b];
    s_in += sq_in[b];
    s_out += sq_out[b];
    s_hs += sq_hs[b];
  }
  float* st = stats->typed_data();
  st[0] = static_cast<float>(total);
  st[1] = static_cast<float>(s_in);
  st[2] = static_cast<float>(s_out);
  st[3] = static_cast<float>(s_hs);
  const bool finite = std::isfinite(st[0]) && std::isfinite(st[1]) && std::isfinite(st[2]) && std::isfinite(st[3]);
  st[4] = finite ? 1.f : 0.f;

  // Phase 2: the updates, only when everything is finite (the XLA path adds zeros otherwise).
  if (finite) {
    for (auto& r : in_reads) Apply(pool, r, n_in, cap, lr, IN, d, sc.order);
    for (auto& r : out_reads) Apply(pool, r, n_out, cap, lr, OUT, d, sc.order);
    for (auto& r : hs_reads) Apply(pool, r, n_hs, cap, lr, HS, d, sc.order);
  }
  for (auto& r : in_reads) n_in.Clear(r);
  for (auto& r : out_reads) n_out.Clear(r);
  for (auto& r : hs_reads) n_hs.Clear(r);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(PtmEmbeddingRowsCpu, RowsImpl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::Buffer<ffi::F32>>()  // in_tab
                                  .Arg<ffi::Buffer<ffi::F32>>()  // out_tab
                                  .Arg<ffi::Buffer<ffi::F32>>()  // hs_tab
                                  .Arg<ffi::Buffer<ffi::S32>>()  // center
                                  .Arg<ffi::Buffer<ffi::F32>>()  // center_weight
                                  .Arg<ffi::Buffer<ffi::S32>>()  // negatives
                                  .Arg<ffi::Buffer<ffi::F32>>()  // negative_weight
                                  .Arg<ffi::Buffer<ffi::S32>>()  // path
                                  .Arg<ffi::Buffer<ffi::F32>>()  // code
                                  .Arg<ffi::Buffer<ffi::F32>>()  // path_weight
                                  .Arg<ffi::Buffer<ffi::S32>>()  // pair_input
                                  .Arg<ffi::Buffer<ffi::S32>>()  // pair_row
                                  .Arg<ffi::Buffer<ffi::F32>>()  // pair_weight
                                  .Arg<ffi::Buffer<ffi::S32>>()  // units
                                  .Arg<ffi::Buffer<ffi::S32>>()  // unit_row
                                  .Arg<ffi::Buffer<ffi::F32>>()  // unit_weight
                                  .Arg<ffi::Buffer<ffi::F32>>()  // learning rate
                                  .Attr<int64_t>("mode")
                                  .Attr<int64_t>("block")
                                  .Attr<float>("cap")
                                  .Attr<bool>("has_out")
                                  .Attr<bool>("has_hs")
                                  .Attr<bool>("sequential")
                                  .Attr<int64_t>("parts")
                                  .Attr<int64_t>("subwords")
                                  .Ret<ffi::Buffer<ffi::F32>>()  // in_tab
                                  .Ret<ffi::Buffer<ffi::F32>>()  // out_tab
                                  .Ret<ffi::Buffer<ffi::F32>>()  // hs_tab
                                  .Ret<ffi::Buffer<ffi::F32>>());  // stats: loss, sumsq in/out/hs, finite

