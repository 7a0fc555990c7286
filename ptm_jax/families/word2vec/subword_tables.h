// fastText's subword tables for the kernel's sequential updates (sequential.h reads a word's units from them).
// cpu_kernel.register_subwords registers each table once, under a key hashed from its contents, through
// ptm_register_subwords; a step names its table's key in the kernel's `subwords` attribute. Included once, by
// rows_cpu.cc.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace {

// One registered table: copies of the caller's arrays, which may go.
struct SubwordTable {
  std::vector<int32_t> ids, lengths;
  int64_t width = 0;
};

std::mutex& TablesMu() {
  static std::mutex mu;
  return mu;
}

std::map<int64_t, std::shared_ptr<const SubwordTable>>& Tables() {
  static std::map<int64_t, std::shared_ptr<const SubwordTable>> tables;
  return tables;
}

std::shared_ptr<const SubwordTable> FindTable(int64_t key) {
  std::lock_guard<std::mutex> lock(TablesMu());
  auto it = Tables().find(key);
  return it == Tables().end() ? nullptr : it->second;
}

}  // namespace

// Registers fastText's subword table (ids [vocab, width], lengths [vocab]; subwords.py) under `key` (0 is
// reserved for none), replacing any table of that key. Returns 0.
extern "C" int ptm_register_subwords(int64_t key, const int32_t* ids, int64_t vocab, int64_t width,
                                     const int32_t* lengths) {
  if (key == 0 || vocab <= 0 || width <= 0) return 1;
  auto table = std::make_shared<SubwordTable>();
  table->ids.assign(ids, ids + vocab * width);
  table->lengths.assign(lengths, lengths + vocab);
  table->width = width;
  std::lock_guard<std::mutex> lock(TablesMu());
  Tables()[key] = std::move(table);
  return 0;
}
