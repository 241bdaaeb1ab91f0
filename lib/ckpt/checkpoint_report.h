// What the commands report of any checkpoint, whatever its format: the summary `inspect` shows, one
// key's storage (`inspect --key`) and the result of `validate`. Each carries the fields every format
// fills, typed, and the format's own view: a JSON document (what --json prints) and lines of text (what
// a terminal shows), so that a command renders any format without knowing it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/problem.h"

namespace fpg::ckpt {

// One stored tensor.
struct TensorSummary {
  std::string name;
  std::string kind;   // fpgather: weight, fp8_data, master … ; DCP: tensor or bytes; safetensors: tensor
  std::string dtype;  // as safetensors names it ("BF16"); a DCP dtype safetensors lacks by torch's name
  std::vector<uint64_t> shape;
  uint64_t numel = 0;
  uint64_t bytes = 0;         // of the data held, uncompressed (declared padding is not held)
  uint64_t stored_bytes = 0;  // on disk
  uint64_t chunks = 0;
};

struct CheckpointSummary {
  std::string path;    // what was opened (a checkpoint directory after resolving `latest`, a file)
  std::string format;  // the format's name (FormatRegistry): "fpgather", "torch_dcp", "safetensors" …
  std::string format_version, producer;
  std::optional<uint64_t> step;
  // Data-parallel size of the stored optimizer layout, where the checkpoint has one; dp_is_smallest:
  // only the smallest size the stored state allows (Megatron buckets held by the first ranks alone).
  std::optional<uint32_t> dp;
  bool dp_is_smallest = false;
  std::string model, layout, optimizer, fp8;  // headline facts; "" when absent
  uint64_t files = 0, bytes = 0, stored_bytes = 0;
  std::vector<TensorSummary> tensors;  // in the checkpoint's order
  nlohmann::json document;             // the format's full summary, as `inspect --json` prints it
  std::vector<std::string> text;       // the same for a reader, line by line
  std::vector<std::string> warnings;   // what the reader should know first (an altered index …)
};

// One key's storage: chunks, files, padding.
struct KeyReport {
  nlohmann::json document;
  std::vector<std::string> text;
};

struct ValidationReport {
  std::string path, format;
  bool readable = true;  // false: a format version this reader cannot read (a problem says which)
  bool data_checked = false;
  bool layout_checked = false;  // a recorded or recovered layout was checked against the keys
  uint64_t tensors = 0, chunks = 0, files = 0;
  uint64_t chunks_read = 0, bytes_read = 0;  // with data: chunks (or items) and stored bytes read
  std::vector<Problem> problems;             // sorted by key and range
  std::vector<std::string> notes;            // what the checks cannot tell, or found fine but unusual
  // The verdict's particulars, in order: "format 2.0", "24 keys", "layout checked" …
  std::vector<std::string> facts;
  nlohmann::json document;  // the format's own fields of `validate --json`
  bool ok() const { return readable && problems.empty(); }
};

// "1 file", "2 files": a count and its noun, plural as English has it for the nouns used here.
std::string count_of(uint64_t n, const std::string& noun);

// Appends `text`, lines each ended by '\n' (as layout::describe gives them), to `lines`.
void append_lines(std::vector<std::string>& lines, const std::string& text);

}  // namespace fpg::ckpt
