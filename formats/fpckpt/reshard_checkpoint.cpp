#include "formats/fpckpt/reshard_checkpoint.h"

#include <chrono>

#include "core/error.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"

namespace fpg::fpckpt {
namespace {

// The source's encoding: zstd (level 1: the level is not recorded) and shuffle where its runs have them.
ckpt::Compression source_compression(const ckpt::Index& ix) {
  ckpt::Compression c;
  c.zstd = false;
  for (const auto& r : ix.runs) {
    c.zstd = c.zstd || (r.filters & ckpt::kFilterZstd);
    c.shuffle = c.shuffle || (r.filters & ckpt::kFilterShuffle);
  }
  if (!c.zstd) c.shuffle = false;
  return c;
}

uint64_t source_chunk_bytes(const ckpt::Index& ix) {
  uint64_t m = 0;
  for (const auto& r : ix.runs) m = std::max<uint64_t>(m, dtype_bytes(r.dtype, r.chunk_elems));
  return m ? m : 4ull << 20;
}

}  // namespace

ReshardOutcome reshard_checkpoint(const ReshardRequest& q) {
  ReshardOutcome out;
  // The source's index checks and the plan take a while on a large checkpoint: named from the start.
  Progress bar("reshard", 0, q.progress && !q.dry_run);
  bar.phase("validating and planning " + q.source);
  const auto opened = open_valid(q.source, "reshard it");
  const CheckpointReader& src = *opened;
  out.source_dir = src.dir();
  for (const ckpt::Key& k : src.index().keys) out.source_keys.push_back(k.name);
  out.target = plan_reshard(src.index(), src.dir(), q.options);
  ReshardRunOptions& ro = out.run_options;
  ro.write.compression = q.compression ? *q.compression : source_compression(src.index());
  ro.write.chunk_bytes = q.chunk_bytes ? q.chunk_bytes : source_chunk_bytes(src.index());
  ro.write.pool = q.pool;
  ro.progress = q.progress;
  ro.bar = &bar;
  std::vector<std::vector<uint32_t>> by_key;
  for (uint32_t k = 0; k < src.index().keys.size(); ++k) by_key.push_back(src.chunks_of(k));
  out.summary = ckpt::summarize(out.target.plan, src.index(), by_key);
  out.summary.peak_memory = reshard_memory_estimate(src.index(), ro);
  if (q.dry_run) return out;
  const auto t0 = std::chrono::steady_clock::now();
  out.result = run_reshard(src, out.target.plan, q.target, ro);
  bar.finish();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace fpg::fpckpt
