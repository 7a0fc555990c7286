// word2vec's packed examples of one batch share in one pass (ptm_jax/families/word2vec/data.py: example_rows
// followed by pack_pairs), called through ctypes from the tf.data map (data.py ``native_rows``). The numpy
// functions are the reference: this gives the same arrays bit for bit (tests/test_word2vec.py), because every
// random choice is the same integer hash of the stream position (sampling.py ``uniforms``: splitmix64's
// finaliser) and every comparison is the same float64 one. It exists for speed: the numpy version costs about
// as much CPU as a fused training step (docs/benchmarks.md "word2vec").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr uint64_t kSubsample = 1, kWindow = 2, kNegative = 3;  // sampling.py SUBSAMPLE, WINDOW, NEGATIVE

inline uint64_t Mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

inline double Uniform(uint64_t key, uint64_t index) {
  return static_cast<double>(Mix(index * kGolden + key) >> 11) * (1.0 / 9007199254740992.0);
}

constexpr int64_t kGuideBuckets = 1 << 16;  // sampling.py GUIDE_BUCKETS

// np.minimum(np.searchsorted(cdf, u, side="right"), V - 1), started at u's bucket of the guide table
// (sampling.py draw_negatives).
inline int32_t Draw(const double* cdf, const int32_t* guide, int64_t v, double u) {
  int64_t i = guide[std::min<int64_t>(static_cast<int64_t>(u * kGuideBuckets), kGuideBuckets - 1)];
  while (i < v - 1 && cdf[i] <= u) ++i;
  return static_cast<int32_t>(i);
}

}  // namespace

extern "C" {

// toks: the tokens of stream positions [lo, lo + n) (pad before the stream's start); the centers are positions
// [lo + reach, lo + reach + rows). Outputs as data.py's features (R = rows, c = slots, S = 2 window, K =
// negative, D = depth); per_pair_negs: negatives [R, c, K] aligned with the pair slots, else [R, K].
int ptm_w2v_examples(const int32_t* toks, int64_t n, int64_t lo, int64_t rows, int64_t reach, const double* keep,
                     const double* cdf, const int32_t* guide, int64_t vocab, uint64_t seed, int32_t window, int32_t negative,
                     int32_t per_pair_negs, int32_t pad_id, int32_t eos_id, const int32_t* points,
                     const int8_t* codes, const int32_t* lengths, int32_t depth, int64_t block, int32_t slots,
                     int32_t* center, float* center_weight, int32_t* pair_input, int32_t* pair_row,
                     int32_t* pair_slot, float* pair_weight, int32_t* negatives, float* negative_weight,
                     int32_t* path, float* code, float* path_weight, float* dropped, int64_t* example_id) {
  if (block <= 0 || rows % block != 0 || window < 1) return 1;
  const uint64_t key_sub = Mix(seed * kGolden + kSubsample);
  const uint64_t key_win = Mix(seed * kGolden + kWindow);
  const uint64_t key_neg = Mix(seed * kGolden + kNegative);
  const int64_t S = 2 * static_cast<int64_t>(window), K = negative;
  std::vector<uint8_t> kept(n);
  std::vector<int64_t> doc(n), kept_at;
  kept_at.reserve(n);
  int64_t d = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = lo + i;
    d += toks[i] == eos_id;
    doc[i] = d;
    kept[i] = pos >= 0 && Uniform(key_sub, static_cast<uint64_t>(pos)) < keep[toks[i]];
    if (kept[i]) kept_at.push_back(i);
  }
  const int64_t nk = static_cast<int64_t>(kept_at.size());
  const int64_t cap = block * slots;
  std::fill(pair_input, pair_input + rows * slots, pad_id);
  std::fill(pair_row, pair_row + rows * slots, 0);
  std::fill(pair_slot, pair_slot + rows * slots, 0);
  std::fill(pair_weight, pair_weight + rows * slots, 0.f);
  if (per_pair_negs && K) {
    std::fill(negatives, negatives + rows * slots * K, pad_id);
    std::fill(negative_weight, negative_weight + rows * slots * K, 0.f);
  }
  int64_t filled = 0;  // pairs placed in the current block
  for (int64_t r = 0; r < rows; ++r) {
    if (r % block == 0) filled = 0;
    const int64_t i = reach + r, cpos = lo + i;
    const int32_t tok = toks[i];
    const int64_t rank = std::lower_bound(kept_at.begin(), kept_at.end(), i) - kept_at.begin();
    const int64_t b = static_cast<int64_t>(std::floor(Uniform(key_win, static_cast<uint64_t>(cpos)) * window));
    bool active = false;
    float drop = 0.f;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t off = s < window ? s - window : s - window + 1;
      const int64_t j = rank + off;
      if (!kept[i] || j < 0 || j >= nk || std::llabs(off) > window - b) continue;
      const int64_t at = kept_at[j];
      if (doc[at] != doc[i]) continue;
      active = true;
      if (filled >= cap) {
        drop += 1.f;
        continue;
      }
      const int64_t p = (r / block) * cap + filled++;
      pair_input[p] = toks[at];
      pair_row[p] = static_cast<int32_t>(r % block);
      pair_slot[p] = static_cast<int32_t>(s);
      pair_weight[p] = 1.f;
      if (per_pair_negs) {
        for (int64_t k = 0; k < K; ++k) {
          const uint64_t idx = (static_cast<uint64_t>(cpos) * S + s) * K + k;
          const int32_t neg = Draw(cdf, guide, vocab, Uniform(key_neg, idx));
          negatives[p * K + k] = neg;
          negative_weight[p * K + k] = neg != tok ? 1.f : 0.f;
        }
      }
    }
    center[r] = tok;
    center_weight[r] = active ? 1.f : 0.f;
    dropped[r] = drop;
    example_id[r] = cpos;
    if (!per_pair_negs) {
      for (int64_t k = 0; k < K; ++k) {
        const int32_t neg = Draw(cdf, guide, vocab, Uniform(key_neg, static_cast<uint64_t>(cpos) * K + k));
        negatives[r * K + k] = neg;
        negative_weight[r * K + k] = active && neg != tok ? 1.f : 0.f;
      }
    }
    for (int64_t q = 0; q < depth; ++q) {
      path[r * depth + q] = points[static_cast<int64_t>(tok) * depth + q];
      code[r * depth + q] = codes[static_cast<int64_t>(tok) * depth + q];
      path_weight[r * depth + q] = active && q < lengths[tok] ? 1.f : 0.f;
    }
  }
  return 0;
}

// fastText's units added to the packed pairs above (ptm_jax/families/fasttext/data.py add_units, the reference):
// the units of each center (skip-gram) or of its pairs' context words (CBOW), packed per block in row order;
// a center whose units do not fit its block trains nothing; fastText's negative weights. Modifies
// center_weight, pair_weight, negative_weight and dropped in place.
int ptm_ft_units(const int32_t* center, float* center_weight, const int32_t* pair_input, const int32_t* pair_row,
                 float* pair_weight, int64_t rows, int32_t slots, int64_t block, const int32_t* sub_ids,
                 int64_t sub_width, const int32_t* sub_len, int32_t cbow, int32_t units, const int32_t* negatives,
                 float* negative_weight, int32_t negative, float* dropped, int32_t* unit_ids, int32_t* unit_row,
                 float* unit_weight) {
  if (block <= 0 || rows % block != 0) return 1;
  const int64_t c = slots, u = units, K = negative, cap = block * u;
  std::vector<int64_t> per_row(rows, 0), pairs_of(rows, 0), cursor(rows, 0);
  for (int64_t p = 0; p < rows * c; ++p) {
    if (pair_weight[p] <= 0.f) continue;
    const int64_t r = (p / (block * c)) * block + pair_row[p];
    ++pairs_of[r];
    if (cbow) per_row[r] += sub_len[pair_input[p]];
  }
  if (!cbow)
    for (int64_t r = 0; r < rows; ++r)
      if (pairs_of[r] > 0) per_row[r] = sub_len[center[r]];
  std::vector<uint8_t> fits(rows);
  for (int64_t r = 0, end = 0; r < rows; ++r) {
    if (r % block == 0) end = 0;
    end += per_row[r];
    fits[r] = end <= cap;
    cursor[r] = (r / block) * cap + end - per_row[r];
  }
  std::fill(unit_ids, unit_ids + rows * u, 0);
  std::fill(unit_row, unit_row + rows * u, 0);
  std::fill(unit_weight, unit_weight + rows * u, 0.f);
  auto put = [&](int64_t r, int32_t word) {
    for (int64_t q = 0; q < sub_len[word]; ++q) {
      const int64_t at = cursor[r]++;
      unit_ids[at] = sub_ids[static_cast<int64_t>(word) * sub_width + q];
      unit_row[at] = static_cast<int32_t>(r % block);
      unit_weight[at] = 1.f;
    }
  };
  if (cbow) {
    for (int64_t p = 0; p < rows * c; ++p) {
      if (pair_weight[p] <= 0.f) continue;
      const int64_t r = (p / (block * c)) * block + pair_row[p];
      if (fits[r]) put(r, pair_input[p]);
    }
  } else {
    for (int64_t r = 0; r < rows; ++r)
      if (pairs_of[r] > 0 && fits[r]) put(r, center[r]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (fits[r]) continue;
    dropped[r] += static_cast<float>(pairs_of[r]);
    center_weight[r] = 0.f;
  }
  for (int64_t p = 0; p < rows * c; ++p) {
    const int64_t r = (p / (block * c)) * block + pair_row[p];
    if (!fits[r]) pair_weight[p] = 0.f;
  }
  if (cbow) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k)
        negative_weight[r * K + k] = negatives[r * K + k] != center[r] && center_weight[r] > 0.f ? 1.f : 0.f;
  } else {
    std::fill(negative_weight, negative_weight + rows * K, 0.f);
    for (int64_t p = 0; p < rows * c; ++p) {
      if (pair_weight[p] <= 0.f) continue;
      const int64_t r = (p / (block * c)) * block + pair_row[p];
      for (int64_t k = 0; k < K; ++k) negative_weight[r * K + k] += negatives[r * K + k] != pair_input[p] ? 1.f : 0.f;
    }
  }
  return 0;
}

}  // extern "C"
