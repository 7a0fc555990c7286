// The vector arithmetic of the fused word2vec/fastText kernel (rows_cpu.cc): dot products, the scoring of a
// hidden vector against its targets, and the sums of gradient rows. Header-only, included by rows_cpu.cc alone
// (native.py hashes it with the source, so a changed header rebuilds the kernel).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ptm_rows {

// 8-float vectors (GCC/Clang vector extensions; AVX or SSE pairs): the sums below keep two vector
// accumulators and reduce them by halves, instead of the 16 dependent scalar adds that an `omp simd`
// reduction compiles to.
typedef float V8 __attribute__((vector_size(32)));

inline V8 Load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline float Sum8(V8 v) {
  const float a = (v[0] + v[4]) + (v[2] + v[6]);
  const float b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}

inline float Dot(const float* a, const float* b, int64_t d) {
  V8 s0 = {}, s1 = {};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    s0 += Load8(a + i) * Load8(b + i);
    s1 += Load8(a + i + 8) * Load8(b + i + 8);
  }
  if (i + 8 <= d) {
    s0 += Load8(a + i) * Load8(b + i);
    i += 8;
  }
  float s = Sum8(s0 + s1);
  for (; i < d; ++i) s += a[i] * b[i];
  return s;
}

inline void Axpy(float g, const float* x, float* y, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] += g * x[i];
}

// y = g x (set) or y += g x.
inline void AxpyOrSet(float g, const float* x, float* y, int64_t d, bool set) {
  if (set) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) y[i] = g * x[i];
  } else {
    Axpy(g, x, y, d);
  }
}

inline double SumSq(const float* x, int64_t d) { return Dot(x, x, d); }

// The summed loss of a block: sum w (max(x, 0) + log1p(exp(-|x|))). The log1p terms of weight 1 (nearly all)
// are multiplied up in double, (1 + e) in (1, 2], and their log taken once per 512 (2^512 is far from double's
// range): one log instead of one log1p a score, which was a tenth of the kernel's time.
struct Loss {
  double sum = 0.0, prod = 1.0;
  int n = 0;
  void Add(float x, float e, float w) {
    sum += w * std::max(x, 0.f);
    if (w == 1.f) {
      prod *= 1.0 + e;
      if (++n == 512) Flush();
    } else {
      sum += w * std::log1p(static_cast<double>(e));
    }
  }
  void Flush() {
    sum += std::log(prod);
    prod = 1.0;
    n = 0;
  }
  double Total() {
    Flush();
    return sum;
  }
};

// One scored target: adds its loss and its gradient to the hidden vector's error and (grad_t) to the target's
// own gradient row; returns d loss / d score (the target row's gradient is that times the hidden vector).
// label 1: -log s(score); label 0: -log s(-score); weight w. With x = score for label 0 and -score for label 1,
// the loss is softplus(x) = max(x, 0) + log1p(exp(-|x|)) and d loss / d x = s(x).
inline float Score(const float* h, const float* t, float label, float w, int64_t d, Loss* loss, float* err,
                   float* grad_t, bool set_err = false, bool set_t = false) {
  const float s = Dot(h, t, d);
  const float x = label > 0.5f ? -s : s;
  const float e = std::exp(-std::fabs(x));
  const float sig = x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);               // s(x)
  loss->Add(x, e, w);
  const float g = label > 0.5f ? -w * sig : w * sig;                          // d loss / d score
  AxpyOrSet(g, t, err, d, set_err);
  if (grad_t) AxpyOrSet(g, h, grad_t, d, set_t);
  return g;
}

// Asks for a row's cache lines ahead of its use (the rows a batch reads are random, and their first touch was
// the kernel's largest stall).
inline void Prefetch(const float* row, int64_t d) {
  for (int64_t i = 0; i < d; i += 16) __builtin_prefetch(row + i);
}

// The targets one hidden vector is scored against: a table row, its label, its weight (0: not scored) and
// which table it is in (1 output, 2 Huffman path: sequential.h's gradient norms). A pair's own negatives are
// appended after its center's targets and cut off again (`Keep`).
struct Targets {
  std::vector<float*> row;
  std::vector<float> label, w;
  std::vector<float*> grad;  // where the target's own gradient row goes (mode 0), else null
  std::vector<int> table;
  void Clear() { Keep(0); }
  void Keep(size_t n) {
    row.resize(n);
    label.resize(n);
    w.resize(n);
    grad.resize(n);
    table.resize(n);
  }
  void Add(float* r, float lab, float weight, float* g = nullptr, int tab = 1) {
    row.push_back(r);
    label.push_back(lab);
    w.push_back(weight);
    grad.push_back(g);
    table.push_back(tab);
  }
  int64_t size() const { return static_cast<int64_t>(row.size()); }
};

// Score without the two vector updates: g[j] = d loss / d score of h against target j at weight scale x w[j]
// (0 where that weight is 0), the losses added in target order.
inline void ScoreAll(const float* h, const Targets& t, float scale, int64_t d, Loss* loss, float* g) {
  for (int64_t j = 0; j < t.size(); ++j) {
    const float w = scale * t.w[j];
    if (w == 0.f) {
      g[j] = 0.f;
      continue;
    }
    const float s = Dot(h, t.row[j], d);
    const float x = t.label[j] > 0.5f ? -s : s;
    const float e = std::exp(-std::fabs(x));
    const float sig = x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e);
    loss->Add(x, e, w);
    g[j] = t.label[j] > 0.5f ? -w * sig : w * sig;
  }
}

// out = sum_j c[j] x[j] (set) or out += it, over the j with c[j] != 0, in one pass over out per 8 terms (the
// separate Axpy calls it replaces read and wrote out once per term).
inline void Combine(const float* const* x, const float* c, int64_t n, float* out, int64_t d, bool set,
                    int64_t c_stride = 1) {
  const float* xs[8];
  float cs[8];
  int m = 0;
  auto flush = [&]() {
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
      V8 acc = set ? V8{} : Load8(out + i);
      for (int j = 0; j < m; ++j) acc += cs[j] * Load8(xs[j] + i);
      std::memcpy(out + i, &acc, sizeof(acc));
    }
    for (; i < d; ++i) {
      float a = set ? 0.f : out[i];
      for (int j = 0; j < m; ++j) a += cs[j] * xs[j][i];
      out[i] = a;
    }
    set = false;
    m = 0;
  };
  for (int64_t j = 0; j < n; ++j) {
    const float cj = c[j * c_stride];
    if (cj == 0.f) continue;
    xs[m] = x[j];
    cs[m] = cj;
    if (++m == 8) flush();
  }
  if (m) {
    flush();
  } else if (set) {
    std::memset(out, 0, sizeof(float) * d);
  }
}

}  // namespace ptm_rows
