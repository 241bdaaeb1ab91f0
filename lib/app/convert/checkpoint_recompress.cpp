#include "app/convert/checkpoint_recompress.h"

#include <algorithm>
#include <vector>

#include "app/convert/staged_output.h"
#include "ckpt/index.h"
#include "ckpt/state_store.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/progress.h"

namespace fpg::app::convert {

RecompressSummary recompress_checkpoint(const std::string& src, const std::string& dst, const RecompressOptions& o) {
  // The index checks read the whole index: named from the start, then the bar.
  Progress progress("recompress", 0, o.progress);
  progress.phase("validating " + src);
  const ckpt::StateStore& store = ckpt::state_store();
  const auto opened = store.open(src, "rewrite it");
  const ckpt::StateReader& reader = *opened;
  const ckpt::Index& ix = reader.index();
  RecompressSummary s;
  s.source = reader.dir();
  s.target = dst;
  ckpt::StateWriteOptions wo;
  wo.compression = o.compression;
  wo.chunk_bytes = o.chunk_bytes;
  wo.pool = o.pool;
  StagedOutput staged(dst, OutputKind::directory, o.force, {src, reader.dir()});
  const std::unique_ptr<ckpt::StateSave> w = store.begin_save(staged.staged_dir(), wo);
  w->documents() = ix.documents;

  uint64_t total = 0;
  for (const auto& r : ix.runs) total += r.numel * (dtype_bits(r.dtype) / 8);
  for (const auto& c : ix.chunks) s.stored_bytes_in += c.stored_bytes;
  progress.set_total(total);
  // Each run by the rank that wrote it, in pieces on its chunk grid.
  std::vector<uint8_t> buf;
  std::vector<long> first_rank(ix.keys.size(), -1);
  for (size_t r = 0; r < ix.runs.size(); ++r) {
    const ckpt::Run& run = ix.runs[r];
    if (run.file >= ix.files.size() || run.key >= ix.keys.size())
      throw FormatError(s.source + ": run " + std::to_string(r) + " names " +
                        (run.key >= ix.keys.size() ? "key #" + std::to_string(run.key) : "file #" + std::to_string(run.file)) +
                        ", which the index does not hold");
    const uint32_t rank = ix.files[run.file].rank;
    if (rank >= ckpt::kMaxRanks)
      throw FormatError(s.source + ": file " + quoted_name(ix.files[run.file].name) + " records rank " + std::to_string(rank) +
                        ", beyond the " + std::to_string(ckpt::kMaxRanks) + " ranks a checkpoint may hold");
    if (first_rank[run.key] < 0) first_rank[run.key] = rank;
    ckpt::StateWriter& rw = w->rank(rank);
    const uint32_t key = rw.declare(ix.keys[run.key]);
    const size_t elem = dtype_bits(run.dtype) / 8;
    const uint64_t grid = std::max<uint64_t>(1, run.chunk_elems);
    const uint64_t piece = std::max<uint64_t>(1, o.piece_bytes / elem / grid) * grid;
    for (uint64_t lo = run.lo; lo < run.hi(); lo += piece) {
      const uint64_t n = std::min(piece, run.hi() - lo);
      buf.resize(n * elem);
      reader.read(run.key, lo, lo + n, buf.data(), o.pool);
      rw.write(key, lo, buf.data(), n);
      progress.advance(n * elem);
      s.logical_bytes += n * elem;
    }
    ++s.runs;
  }
  // Declared padding, by a rank that stores data of the key (rank 0 for a key of padding only).
  for (const ckpt::Padding& p : ix.padding) {
    if (p.key >= ix.keys.size())
      throw FormatError(s.source + ": padding names key #" + std::to_string(p.key) + ", which the index does not hold");
    ckpt::StateWriter& rw = w->rank(first_rank[p.key] < 0 ? 0 : static_cast<uint32_t>(first_rank[p.key]));
    rw.declare_padding(rw.declare(ix.keys[p.key]), p.lo, p.hi);
  }
  const ckpt::Index out = w->commit();
  staged.commit();
  s.keys = out.keys.size();
  for (const auto& c : out.chunks) s.stored_bytes_out += c.stored_bytes;
  return s;
}

}  // namespace fpg::app::convert
