// Validation of a DCP checkpoint, with DCP's own rules stated exactly: where torch checks that chunks
// are in bounds, pairwise disjoint and that their volumes sum to the tensor's, this reports each
// chunk out of bounds, each overlap and each uncovered part as a box, on the problem records of
// fpgather's own checkpoints (ckpt/problem.h). For an n-D key, Problem::lo/hi are the row-major flat
// indices of the box's first element and one past its last; the message names the box.
//
// From the metadata alone: every chunk's offsets and sizes have the tensor's number of dimensions
// (shape), lie inside it (out_of_bounds), overlap no other chunk (overlap), and together cover it
// (gap); every chunk and bytes entry has a storage entry (missing_file). From the directory: every
// storage entry's relative_path is a plain name of a regular file in it (missing_file) and its range
// lies inside that file (truncated_file). With data: every item is read — its zip and CRC-32, the
// stored tensor's dtype (dtype) and shape (shape) against the metadata, a bytes item decoded as the
// torch.save object it holds — failures as checksum problems naming the reason. Each check lists at
// most CappedProblems::kListed problems per key and kind and sums up the rest in one more problem
// ("... and N more"), so that a claim of a million broken chunks makes a report of a few lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/problem.h"
#include "formats/dcp/checkpoint_dir.h"
#include "formats/dcp/metadata/metadata.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

struct ValidateOptions {
  bool data = false;  // read and decode every item
};

struct ValidationReport {
  std::vector<ckpt::Problem> problems;  // ordered by key, range, kind (ckpt::sort_problems)
  uint64_t tensors = 0;
  uint64_t bytes_entries = 0;
  uint64_t chunks = 0;
  uint64_t items_read = 0;   // with data
  uint64_t bytes_read = 0;   // with data: stored item bytes
  bool ok() const { return problems.empty(); }
};

// "[0:2, 4:8]": a box as offset:end per dimension.
std::string box_string(const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& sizes);

// Chunk arity, bounds, overlaps and coverage of every tensor, and a storage entry for every item.
std::vector<ckpt::Problem> check_metadata(const Metadata& m);

// Every storage entry's file and range, and every tensor chunk's item long enough to hold the
// chunk's elements (an item shorter than their bytes, 0 for a chunk that has any, is truncated_file).
std::vector<ckpt::Problem> check_storage(const Metadata& m, const CheckpointDir& dir);

// Every item read and decoded (skipping items whose file check_storage found unusable).
std::vector<ckpt::Problem> check_items(const Reader& r, uint64_t* items_read, uint64_t* bytes_read);

// All of the above that `options` asks for.
ValidationReport validate(const Reader& r, const ValidateOptions& options = {});

}  // namespace fpg::dcp

namespace fpg::dcp {

// Runs validate() without data and throws fpg::Error with exit code 1 if it finds problems: the
// message names the checkpoint and what was refused (`refusing`, e.g. "export it") and lists them.
void require_valid(const Reader& r, const std::string& refusing);

}  // namespace fpg::dcp
