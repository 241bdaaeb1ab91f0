// What `fpgather inspect` shows about a checkpoint: the index's headline facts (format, producer,
// step, model, layout, optimizer, FP8 recipe — read from the documents when present) and sizes per
// key kind with the compression ratio, plus per-key rows.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
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
  std::optional<uint64_t> step_count, dp;  // the step and the layout's dp, where the documents hold integers
  // The same facts typed, for --json (null when the document is absent): {"name", "params"},
  // {"kind", "dp"}, {"name", "state_layout"}, the fp8 document's {"enabled", "recipe"}.
  nlohmann::json model_json, layout_json, optimizer_json, fp8_json;
  std::vector<std::string> documents;
  KindSizes by_kind[ckpt::kKeyKindCount];
  KindSizes total;
  uint64_t files = 0, file_bytes = 0, runs = 0;
  double compression_ratio = 1;  // logical bytes of data chunks / stored bytes
  std::vector<KeyRow> keys;      // index order
};

Summary summarize(const ckpt::Index& index);

// One chunk of a key as `inspect --key` lists it.
struct ChunkRow {
  uint64_t lo = 0, hi = 0;
  std::string file;               // the data file; "" when the run names no file in the table
  uint32_t dataset = 0;
  std::optional<uint64_t> chunk;  // HDF5 chunk number; none for a run of 0-element chunks or a chunk before its run
  uint32_t stored_bytes = 0, flags = 0;
  uint64_t checksum_stored = 0, checksum_logical = 0;
};

struct KeyDetail {
  std::vector<ChunkRow> chunks;                        // by offset
  std::vector<std::pair<uint64_t, uint64_t>> padding;  // [lo, hi), index order
};

// The chunks and declared padding of key `key` (< index.keys.size()) as the index records them. Any
// index is listed, however broken (validate says what is wrong with it): no field is trusted.
KeyDetail describe_key(const ckpt::Index& index, uint32_t key);

}  // namespace fpg::fpckpt
