// One thing wrong with a checkpoint, as validation reports it: what kind, which key, which flat
// range [lo, hi) and which file. `fpgather validate` prints one line per problem and --json the same
// records.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fpg::ckpt {

enum class ProblemKind : uint8_t {
  gap,              // part of [0, numel) covered by neither data nor padding
  overlap,          // two intervals (data or padding) share elements
  out_of_bounds,    // an interval outside [0, numel), or a chunk outside its run
  dtype,            // a run written with another dtype than its key's
  shape,            // a shape whose product overflows, or a chunk/run size that does not add up
  checksum,         // stored or logical bytes differ from the recorded checksum, or cannot be decoded
  missing_file,     // a referenced data file is absent (or a reference points at no file)
  truncated_file,   // a data file is shorter (or longer) than recorded
  layout_mismatch,  // keys, padding or ownership differ from what the recorded layout implies
  version,          // the index has a format version this reader cannot read
  index_checksum,   // the index's tables or documents differ from its recorded checksum
};

std::string_view problem_kind_name(ProblemKind k);  // "gap", "out_of_bounds", ...

struct Problem {
  ProblemKind kind = ProblemKind::gap;
  std::string key;   // empty if none applies
  uint64_t lo = 0, hi = 0;
  std::string file;  // empty if none applies
  std::string message;
};

// "gap optimizer/w/exp_avg [128, 192) rank-00001.h5: not covered by data or padding"; the key, file
// and message through printable(), so that no name from a file can start a line of its own.
std::string to_string(const Problem& p);

// Orders problems by key, lo, kind: the output order of validate (stable and diffable).
void sort_problems(std::vector<Problem>& problems);

}  // namespace fpg::ckpt
