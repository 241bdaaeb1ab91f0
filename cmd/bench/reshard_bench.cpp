#include "cmd/bench/reshard_bench.h"

#include <algorithm>

#include "ckpt/chunk_codec.h"
#include "cmd/bench/page_cache.h"
#include "cmd/bench/peak_rss.h"
#include "cmd/bench/plain_io.h"
#include "cmd/bench/scratch_dir.h"
#include "cmd/bench/synthetic_megatron.h"
#include "cmd/bench/timing.h"
#include "core/fs.h"
#include "model/spec_json.h"
#include "app/checkpoint/checkpointing.h"
#include "app/reshard/reshard.h"
#include "core/error.h"
#include "formats/fpckpt/reshard_checkpoint.h"

namespace fpg::bench {
namespace {

// One training step of `model` on from_dp thread ranks, saved uncompressed under the root `src`
// with the defaults of `fpgather train` (AdamW, bucketed, model layout). Wall seconds.
double save_trained(const std::string& model, const ReshardBenchOptions& o, const std::string& src) {
  app::train::TrainOptions t;
  t.spec = model::resolve_model(model);
  t.dp = o.from_dp;
  t.steps = 1;
  t.threads_per_rank = o.threads > o.from_dp ? o.threads / o.from_dp : 1;
  app::checkpoint::CheckpointOptions c;
  c.save = src;
  c.compression = ckpt::parse_compression("none");
  const double t0 = wall_seconds();
  app::checkpoint::train_with_checkpoints(t, c);
  return wall_seconds() - t0;
}

// The target of a Megatron case, as `fpgather reshard` takes it from its flags.
ckpt::ReshardTarget megatron_case(const std::string& name) {
  ckpt::ReshardTarget t;
  if (name == "dp") {
    t.dp = 4;
  } else if (name == "tp") {
    t.tp = 1;
    t.pp = 1;
    t.dp = 2;
    t.bucket_size = "40000000";
  } else if (name == "full") {
    t.dp = 2;
    t.megatron_form = "fully_reshardable";
  } else {
    throw UsageError("megatron case '" + name + "': expected dp, tp or full");
  }
  return t;
}

// Fills the ratios of a row whose bytes and seconds are set, and measures its same-size duplex rate.
void finish_row(ReshardBenchRow& row, const ReshardBenchResult& res, const std::string& base) {
  const double disk = std::min(res.plain_write_gbps, res.plain_read_gbps);
  row.gbps = row.bytes_written / row.reshard_s / 1e9;
  row.ratio = disk > 0 ? row.gbps / disk : 0;
  const double serial = 1 / (1 / res.plain_read_gbps + 1 / res.plain_write_gbps);
  row.serial_ratio = serial > 0 ? row.gbps / serial : 0;
  row.duplex_ratio = res.duplex_gbps > 0 ? row.gbps / res.duplex_gbps : 0;
  row.same_size_duplex_gbps = measure_plain_io(base, row.bytes_written, true).duplex_gbps();
  row.same_size_duplex_ratio = row.same_size_duplex_gbps > 0 ? row.gbps / row.same_size_duplex_gbps : 0;
}

}  // namespace

ReshardBenchResult run_reshard_bench(const ReshardBenchOptions& o) {
  ReshardBenchResult res;
  const ScratchDir scratch(o.dir, "reshard");
  const std::string& base = scratch.path();

  const PlainIo plain = measure_plain_io(base, o.plain_bytes, true);
  res.plain_write_gbps = plain.write_gbps();
  res.plain_read_gbps = plain.read_gbps();
  res.duplex_gbps = plain.duplex_gbps();
  for (const std::string& model : o.models) {
    ReshardBenchRow row;
    row.model = model;
    // A model may be a JSON spec's path: its directories are named by the file's name alone.
    const std::string stem = fs::split_path(model).second;
    const std::string src = base + "/" + stem + "-src", dst = base + "/" + stem + "-dst";
    row.train_s = save_trained(model, o, src);
    evict_path(src);

    fpckpt::ReshardRequest q;  // as `fpgather reshard SRC DST --dp TO --accumulation 1 --compress none`
    q.source = src;
    q.target = dst;
    q.options.dp = o.to_dp;
    q.options.accumulation = 1;
    q.compression = ckpt::parse_compression("none");
    reset_peak_rss();  // the training's memory is freed: the peak counts the reshard's own
    const double t0 = wall_seconds();
    const fpckpt::ReshardOutcome out = fpckpt::reshard_checkpoint(q);
    row.reshard_s = wall_seconds() - t0;
    row.peak_rss = read_rss().peak;
    row.bytes_read = out.result->bytes_read;
    row.bytes_written = out.summary.bytes_written;
    fs::remove_tree(src);
    fs::remove_tree(dst);
    finish_row(row, res, base);
    res.rows.push_back(row);
  }
  if (o.megatron.empty()) return res;
  for (const std::string& name : o.megatron) megatron_case(name);  // refuse a bad name before the save
  SyntheticMegatronOptions m;  // scripts/bench-megatron.sh's export and reshard checkpoint
  m.dir = base + "/megatron-src";
  m.tp = 2;
  m.pp = 2;
  m.dp = 2;
  m.layers = o.megatron_layers;
  m.hidden = o.megatron_hidden;
  m.ffn = 4 * o.megatron_hidden;
  m.heads = 16;
  m.query_groups = 8;
  m.vocab = 32768;
  m.bucket_size = 40000000;
  const double save_s = make_synthetic_megatron(m).seconds;
  for (const std::string& name : o.megatron) {
    ReshardBenchRow row;
    row.model = "megatron-" + name;
    row.train_s = save_s;
    const std::string dst = base + "/megatron-dst";
    evict_path(m.dir);
    reset_peak_rss();
    const double t0 = wall_seconds();
    const ckpt::ReshardReport r = app::reshard::reshard(m.dir, dst, megatron_case(name));
    row.reshard_s = wall_seconds() - t0;
    row.peak_rss = read_rss().peak;
    row.bytes_read = r.bytes_read;
    row.bytes_written = r.bytes_written;
    fs::remove_tree(dst);
    finish_row(row, res, base);
    res.rows.push_back(row);
  }
  fs::remove_tree(m.dir);
  return res;
}

}  // namespace fpg::bench
