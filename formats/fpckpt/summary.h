// What `fpgather inspect` shows about a checkpoint: the index's headline facts (format, producer,
// step, model, layout, optimizer, FP8 recipe — read from the documents when present) and sizes per
// key kind with the compression ratio, plus per-key rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/index.h"

namespace fpg::fpckpt {

struct KindSizes {
  uint64_t keys = 0, numel = 0, logical_bytes = 0, stored_bytes = 0, chunks = 0, padding_elems = 0;
};

struct KeyRow {
  std::string name;
  ckpt::KeyKind kind;
  DType dtype;
  std::vector<uint64_t> shape;
  uint64_t numel = 0, chunks = 0, padding_intervals = 0, padding_elems = 0, logical_bytes = 0, stored_bytes = 0;
};

struct Summary {
  std::string format_version, producer;
  std::string step, model, layout, optimizer, fp8;  // "" when the document is absent
  std::vector<std::string> documents;
  KindSizes by_kind[ckpt::kKeyKindCount];
  KindSizes total;
  uint64_t files = 0, file_bytes = 0, runs = 0;
  double compression_ratio = 1;  // logical bytes of data chunks / stored bytes
  std::vector<KeyRow> keys;      // index order
};

Summary summarize(const ckpt::Index& index);

}  // namespace fpg::fpckpt
