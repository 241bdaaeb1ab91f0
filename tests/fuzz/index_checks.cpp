#include "index_checks.h"

#include <algorithm>
#include <vector>

#include "ckpt/coverage.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/summary.h"
#include "formats/fpckpt/validate.h"

namespace fpg::fuzz {
namespace {

// Where the reader looks for data files: absent, so nothing outside the fuzz input is ever read.
constexpr const char* kNoDirectory = "/nonexistent/fpgather-fuzz";
// Elements read per window: bounds the output buffer whatever numel the index claims.
constexpr uint64_t kWindow = 4096;
// Keys read per input: bounds the time one input takes.
constexpr size_t kKeysRead = 64;

void read_window(const fpckpt::CheckpointReader& reader, uint32_t key, uint64_t lo, uint64_t hi, ThreadPool& pool) {
  const DType dtype = reader.index().keys[key].dtype;
  std::vector<uint8_t> out(dtype_bytes(dtype, hi - lo));
  try {
    reader.read(key, lo, hi, out.data(), &pool);
  } catch (const FormatError&) {
  }
}

}  // namespace

void run_index_checks(ckpt::Index index) {
  ckpt::check_index(index);
  bool layout_checked = false;
  fpckpt::check_recorded_layout(index, layout_checked);
  fpckpt::summarize(index);
  ckpt::intervals_by_key(index);

  static ThreadPool pool(1);  // reads inline on this thread
  std::unique_ptr<fpckpt::CheckpointReader> reader;
  try {
    reader = std::make_unique<fpckpt::CheckpointReader>(kNoDirectory, std::move(index));
  } catch (const FormatError&) {
    return;  // validate and inspect stop here too
  }
  const ckpt::Index& ix = reader->index();
  ckpt::check_files(ix, reader->dir());
  for (uint32_t k = 0; k < std::min(ix.keys.size(), kKeysRead); ++k) {
    fpckpt::describe_key(ix, k);
    const uint64_t numel = ix.keys[k].numel();
    read_window(*reader, k, 0, std::min(numel, kWindow), pool);
    if (numel > kWindow) read_window(*reader, k, numel - kWindow, numel, pool);
  }
}

}  // namespace fpg::fuzz
