#include "cmd/bench/synthetic_dcp.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "cmd/bench/timing.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "formats/dcp/dcp_writer.h"

namespace fpg::bench {
namespace {

struct KeyLayout {
  std::string fqn;
  uint64_t chunks = 0;     // chunks of this key
  uint64_t rows = 1;       // 2-D: rows per chunk; 1-D: 1
  uint64_t cols = 0;       // 2-D: columns; 1-D: elements per chunk
  bool two_d = false;
  std::vector<uint64_t> shape() const {
    return two_d ? std::vector<uint64_t>{chunks * rows, cols} : std::vector<uint64_t>{chunks * cols};
  }
};

// The largest power of two up to 1024 dividing n.
uint64_t row_length(uint64_t n) {
  uint64_t c = 1;
  while (c < 1024 && n % (2 * c) == 0) c *= 2;
  return c;
}

// The chunks [first, last) of a key with n chunks that rank r of `ranks` holds: j * ranks / n == r.
std::pair<uint64_t, uint64_t> rank_block(uint64_t n, uint32_t r, uint32_t ranks) {
  using u128 = unsigned __int128;
  auto first = [&](uint64_t rank) { return static_cast<uint64_t>((static_cast<u128>(rank) * n + ranks - 1) / ranks); };
  return {first(r), first(uint64_t{r} + 1)};
}

}  // namespace

DcpFileSizes dcp_file_sizes(const std::string& dir) {
  DcpFileSizes s;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    s.files += e.file_size();
    if (e.path().filename() == ".metadata") s.metadata = e.file_size();
  }
  return s;
}

std::string synthetic_key(uint32_t k) {
  return "model.layers." + std::to_string(k) + (k % 2 == 0 ? ".weight" : ".bias");
}

SyntheticDcpSummary make_synthetic_dcp(const SyntheticDcpOptions& o) {
  if (o.chunks == 0 || o.keys == 0 || o.ranks == 0) throw UsageError("--chunks, --keys and --ranks must be positive");
  if (o.keys > o.chunks)
    throw UsageError("--keys " + std::to_string(o.keys) + " is more than --chunks " + std::to_string(o.chunks) +
                     ": every key needs a chunk");
  if (o.chunk_bytes == 0 || o.chunk_bytes % 4 != 0)
    throw UsageError("--chunk-bytes " + std::to_string(o.chunk_bytes) + " is not a positive number of fp32 elements");
  if (o.chunk_bytes > (uint64_t{1} << 62) / o.chunks)
    throw UsageError("--chunks times --chunk-bytes is too large");
  const double t0 = wall_seconds();
  const uint64_t elements = o.chunk_bytes / 4;
  const dcp::TorchDType& f32 = *dcp::find_torch_dtype("float32");

  std::vector<KeyLayout> keys(o.keys);
  dcp::DcpWriter writer(o.dir);
  for (uint32_t k = 0; k < o.keys; ++k) {
    KeyLayout& key = keys[k];
    key.fqn = synthetic_key(k);
    key.chunks = o.chunks / o.keys + (k < o.chunks % o.keys ? 1 : 0);
    key.two_d = k % 2 == 0;
    key.cols = key.two_d ? row_length(elements) : elements;
    key.rows = elements / key.cols;
    writer.declare_tensor(key.fqn, f32, key.shape());
  }

  ThreadPool::global().parallel_for(o.ranks, [&](size_t r) {
    dcp::DcpRankWriter& out = writer.rank(static_cast<uint32_t>(r));
    for (uint32_t k = 0; k < o.keys; ++k) {
      const KeyLayout& key = keys[k];
      const auto [first, last] = rank_block(key.chunks, static_cast<uint32_t>(r), o.ranks);
      for (uint64_t j = first; j < last; ++j) {
        const uint64_t base = j * elements;  // row-sharded: a chunk is a contiguous run of the flat tensor
        const dcp::FillBytes fill = [&, base](uint64_t offset, void* dst, size_t size) {
          auto* p = static_cast<uint8_t*>(dst);
          for (size_t i = 0; i < size / 4; ++i) {
            const float v = synthetic_value(k, base + offset / 4 + i);
            std::memcpy(p + 4 * i, &v, 4);
          }
        };
        if (key.two_d)
          out.write_tensor(key.fqn, {j * key.rows, 0}, {key.rows, key.cols}, fill);
        else
          out.write_tensor(key.fqn, {j * key.cols}, {key.cols}, fill);
      }
    }
  });
  writer.commit();

  SyntheticDcpSummary s;
  s.chunks = o.chunks;
  s.keys = o.keys;
  s.ranks = o.ranks;
  s.tensor_bytes = o.chunks * o.chunk_bytes;
  const DcpFileSizes sizes = dcp_file_sizes(o.dir);
  s.file_bytes = sizes.files;
  s.metadata_bytes = sizes.metadata;
  s.seconds = wall_seconds() - t0;
  return s;
}

}  // namespace fpg::bench
