// Host side of the batched FP8 passes: descriptors, task lists, uploads (kernels/fp8_batch.h).
#include "kernels/fp8_batch.h"

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "fp8/source.h"
#include "kernels/cuda_check.h"
#include "kernels/fp8_launch.h"

namespace fpg::cuda::fp8 {

using fpg::fp8::Plan;
using fpg::fp8::Scaling;

namespace {

bool aligned(const void* p, uint64_t start, uint64_t elem_bytes, uint64_t align) {
  return p == nullptr || (reinterpret_cast<uintptr_t>(p) - start * elem_bytes) % align == 0;
}

// Splits `items` work items of job `job` into tasks of at most `per` items.
void add_tasks(std::vector<Task>& tasks, size_t job, uint64_t items, uint32_t per) {
  for (uint64_t first = 0; first < items; first += per) {
    Task t;
    t.job = static_cast<uint32_t>(job);
    t.first = first;
    t.items = static_cast<uint32_t>(items - first < per ? items - first : per);
    tasks.push_back(t);
  }
  if (tasks.size() > UINT32_MAX) throw InternalError("fp8 batch: more than 2^32 tasks");
}

// One task per tile of a tiled job (fp8_fused_tiles.cu): `first` is its band, `items` its tile
// column, so that the kernel needs no division to find it.
void add_tile_tasks(std::vector<Task>& tasks, size_t job, uint64_t bands, uint64_t tiles_per_band) {
  if (tiles_per_band > UINT32_MAX) throw InternalError("fp8 batch: more than 2^32 tiles in a band");
  for (uint64_t band = 0; band < bands; ++band)
    for (uint64_t c = 0; c < tiles_per_band; ++c) {
      Task t;
      t.job = static_cast<uint32_t>(job);
      t.first = band;
      t.items = static_cast<uint32_t>(c);
      tasks.push_back(t);
    }
  if (tasks.size() > UINT32_MAX) throw InternalError("fp8 batch: more than 2^32 tasks");
}

template <class T>
T* upload(const std::vector<T>& v) {
  if (v.empty()) return nullptr;
  T* d = nullptr;
  FPG_CUDA_CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
  FPG_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

int persistent_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  int dev = 0;
  FPG_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find({dev, kernel});
  if (it != cache.end()) return it->second;
  int sms = 0, per_sm = 0;
  FPG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  FPG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  const int blocks = sms * (per_sm > 0 ? per_sm : 1);
  cache[{dev, kernel}] = blocks;
  return blocks;
}

DeviceJob make_device_job(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax,
                          float* amax_col, const ScaleView& s, uint8_t* out, uint8_t* out_col) {
  if (start > p.numel() || count > p.numel() - start)
    throw InternalError("fp8: fragment [" + std::to_string(start) + ", " + std::to_string(start + count) +
                        ") is outside a tensor of " + std::to_string(p.numel()) + " elements");
  DeviceJob j;
  j.M = p.M;
  j.K = p.K;
  j.start = start;
  j.count = count;
  j.grid_cols = p.grid.cols;
  j.scaling = static_cast<uint8_t>(p.recipe.scaling);
  j.format = static_cast<uint8_t>(p.recipe.format);
  j.input = static_cast<uint8_t>(p.input);
  j.mx_rule = static_cast<uint8_t>(p.recipe.mx_rule);
  j.has_row = p.has_rowwise();
  j.has_col = p.has_columnwise();
  switch (p.recipe.scaling) {
    case Scaling::tensorwise:
    case Scaling::delayed: break;
    case Scaling::blockwise_1x128: j.block_shift = 7; break;
    case Scaling::blockwise_128x128: j.band_shift = j.block_shift = 7; break;
    case Scaling::mxfp8: j.block_shift = 5; break;
  }
  const uint64_t es = fpg::fp8::input_size(p.input), v = 16 / es;
  const bool vec = p.K % v == 0 && aligned(in, start, es, 16) && aligned(out, start, 1, v) &&
                   aligned(out_col, start, 1, v);
  j.vec = static_cast<uint8_t>(vec ? v : 1);
  j.in = in;
  j.amax = amax;
  j.amax_col = amax_col;
  j.scale = s.scale;
  j.e8m0 = s.e8m0;
  j.e8m0_col = s.e8m0_col;
  j.out = out;
  j.out_col = out_col;
  return j;
}

namespace {

// The fused kind a plan's recipe takes: kFusedRows, kFusedTiles, or 0.
uint8_t fused_kind(const Plan& p) {
  const Scaling s = p.recipe.scaling;
  if (s == Scaling::mxfp8) return p.has_columnwise() ? kFusedTiles : kFusedRows;
  if (s == Scaling::blockwise_1x128) return p.K % 128 == 0 ? kFusedRows : 0;
  if (s == Scaling::blockwise_128x128) return kFusedTiles;
  return 0;
}

}  // namespace

bool can_fuse(const Plan& p, uint64_t start, uint64_t count) {
  const uint8_t kind = fused_kind(p);
  if (!kind || start > p.numel() || count > p.numel() - start || count == 0) return false;
  const bool mx = p.recipe.scaling == Scaling::mxfp8;
  if (kind == kFusedRows) {
    const uint64_t block = mx ? 32 : 128;
    return start % block == 0 && count % block == 0;
  }
  const uint64_t band = (mx ? 32 : 128) * p.K, end = start + count;
  return p.K % (16 / fpg::fp8::input_size(p.input)) == 0 && start % band == 0 && (end % band == 0 || end == p.numel());
}

namespace {

// Whether a job's vector width suits its fused kernel: a row block within one warp access, tiles of
// 16-byte vectors.
bool vectors_fit(const Plan& p, const DeviceJob& j) {
  const uint64_t block = p.recipe.scaling == Scaling::mxfp8 ? 32 : 128;
  return fused_kind(p) == kFusedRows ? block / j.vec <= 32 : j.vec > 1;
}

}  // namespace

bool can_fuse(const Plan& p, uint64_t start, uint64_t count, const void* in, const uint8_t* out,
              const uint8_t* out_col) {
  if (!can_fuse(p, start, count)) return false;
  const DeviceJob j = make_device_job(p, start, count, in, nullptr, nullptr, {}, const_cast<uint8_t*>(out),
                                      const_cast<uint8_t*>(out_col));
  return vectors_fit(p, j);
}

DeviceJob make_fused_job(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax, float* amax_col,
                         float* scale, float* scale_inv, uint8_t* e8m0, uint8_t* e8m0_col, uint8_t* out,
                         uint8_t* out_col) {
  if (!can_fuse(p, start, count))
    throw InternalError("fp8: a fused job needs MX, blockwise 1x128 (K % 128 == 0) or 128x128 and a fragment of "
                        "whole blocks (rows-only recipes) or whole bands of tiles (128x128, MX columnwise)");
  const uint8_t kind = fused_kind(p);
  DeviceJob j = make_device_job(p, start, count, in, amax, amax_col, {}, out, out_col);
  if (!vectors_fit(p, j)) throw InternalError("fp8: a fused job needs 16-byte aligned input and outputs");
  j.fused = kind;
  j.pow2 = p.recipe.pow2;
  j.epsilon = p.recipe.amax_epsilon;
  j.scale_out = scale;
  j.scale_inv_out = scale_inv;
  j.e8m0_out = e8m0;
  j.e8m0_col_out = e8m0_col;
  return j;
}

DeviceJob make_fused_job(const Plan& p, uint64_t start, uint64_t count, const void* in, float* amax, float* scale,
                         float* scale_inv, uint8_t* e8m0, uint8_t* out) {
  return make_fused_job(p, start, count, in, amax, nullptr, scale, scale_inv, e8m0, nullptr, out, nullptr);
}

DeviceJob make_device_job(const fpg::fp8::FragmentJob& j) {
  if (!j.plan) throw InternalError("fp8 batch: a job without a plan");
  return make_device_job(*j.plan, j.start, j.count, j.in, j.amax, j.amax_col, j.scales, j.out, j.out_col);
}

AmaxMode amax_mode(const DeviceJob& j) {
  const auto s = static_cast<Scaling>(j.scaling);
  if (s == Scaling::tensorwise || s == Scaling::delayed) return AmaxMode::tensor;
  const uint64_t block = uint64_t{1} << j.block_shift;
  const bool row_blocks = s == Scaling::blockwise_1x128 || s == Scaling::mxfp8;
  // rows: the G = block / vec lanes of a block reduce it by shuffles, so G <= 32.
  if (row_blocks && j.K % block == 0 && block / j.vec <= 32)
    return s == Scaling::mxfp8 ? AmaxMode::rows_mx : AmaxMode::rows;
  if (s == Scaling::blockwise_128x128 && j.K % block == 0 && block / j.vec <= 32) return AmaxMode::tiles;
  return AmaxMode::generic;
}

CastMode cast_mode(const DeviceJob& j) {
  const auto s = static_cast<Scaling>(j.scaling);
  if (j.fused == kFusedTiles) return s == Scaling::mxfp8 ? CastMode::fused_mx_tiles : CastMode::fused_tiles;
  if (j.fused) return s == Scaling::mxfp8 ? CastMode::fused_mx : CastMode::fused;
  if (j.has_col && j.out_col) return CastMode::generic;
  if (s == Scaling::tensorwise || s == Scaling::delayed) return CastMode::tensor;
  const bool row_blocks = s == Scaling::blockwise_1x128 || s == Scaling::mxfp8;
  if (row_blocks && j.K % (uint64_t{1} << j.block_shift) == 0)
    return s == Scaling::mxfp8 ? CastMode::rows_mx : CastMode::rows;
  if (s == Scaling::blockwise_128x128 && j.K % 128 == 0) return CastMode::tiles;
  return CastMode::generic;
}

namespace {

// Orders the tasks by kernel instantiation (mode, input, vector width, format) and cuts the groups.
class Grouper {
 public:
  void add(const DeviceJob& j, uint8_t mode, bool with_format, size_t job, uint64_t items, uint32_t per) {
    add_tasks(by_key_[key(j, mode, with_format)], job, items, per);
  }
  void add_tiles(const DeviceJob& j, uint8_t mode, size_t job, uint64_t bands, uint64_t tiles_per_band) {
    add_tile_tasks(by_key_[key(j, mode, true)], job, bands, tiles_per_band);
  }
  std::vector<Task> tasks(std::vector<LaunchGroup>& groups) const {
    std::vector<Task> all;
    for (const auto& [k, t] : by_key_) {
      LaunchGroup g;
      g.mode = k.mode;
      g.input = k.input;
      g.vec = k.vec;
      g.format = k.format;
      g.first = static_cast<uint32_t>(all.size());
      g.count = static_cast<uint32_t>(t.size());
      for (size_t i = 0; i < t.size(); ++i) g.jobs += i == 0 || t[i].job != t[i - 1].job;
      groups.push_back(g);
      all.insert(all.end(), t.begin(), t.end());
    }
    if (all.size() > UINT32_MAX) throw InternalError("fp8 batch: more than 2^32 tasks");
    return all;
  }

 private:
  struct Key {
    uint8_t mode, input, vec, format;
    bool operator<(const Key& o) const {
      return std::tie(mode, input, vec, format) < std::tie(o.mode, o.input, o.vec, o.format);
    }
  };
  static Key key(const DeviceJob& j, uint8_t mode, bool with_format) {
    return Key{mode, j.input, static_cast<uint8_t>(j.vec > 1), with_format ? j.format : uint8_t{0}};
  }
  std::map<Key, std::vector<Task>> by_key_;
};

}  // namespace

DeviceBatch::DeviceBatch(const std::vector<DeviceJob>& jobs) : n_jobs_(jobs.size()) {
  Grouper amax, cast;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const DeviceJob& j = jobs[i];
    if (j.count == 0 || j.K == 0) continue;
    const uint64_t ncv = (j.K + j.vec - 1) / j.vec;
    const uint64_t r0 = j.start / j.K, r1 = (j.start + j.count - 1) / j.K;
    const uint64_t row_items = (r1 - r0 + 1) * ncv;
    if (j.fused == kFusedTiles) {  // one task per tile: a band of rows x fused_tile_cols columns
      const bool mx = static_cast<Scaling>(j.scaling) == Scaling::mxfp8;
      const uint64_t rows = mx ? 32 : 128, w = fused_tile_cols(mx);
      cast.add_tiles(j, static_cast<uint8_t>(cast_mode(j)), i, (r1 - r0) / rows + 1, (j.K + w - 1) / w);
      continue;
    }
    if ((j.has_row && j.out) || (j.has_col && j.out_col) || j.fused)
      cast.add(j, static_cast<uint8_t>(cast_mode(j)), true, i, row_items, kCastTaskItems);
    if (j.has_row && j.amax && !j.fused)
      amax.add(j, static_cast<uint8_t>(amax_mode(j)), false, i, row_items, kAmaxTaskItems);
    if (j.has_col && j.amax_col)
      amax.add(j, static_cast<uint8_t>(AmaxMode::col), false, i, (r1 / 32 - r0 / 32 + 1) * ncv, kColTaskItems);
  }
  const std::vector<Task> amax_tasks = amax.tasks(amax_groups_), cast_tasks = cast.tasks(cast_groups_);
  try {
    jobs_ = upload(jobs);
    amax_tasks_ = upload(amax_tasks);
    cast_tasks_ = upload(cast_tasks);
  } catch (...) {
    release();
    throw;
  }
}

void DeviceBatch::release() {
  // Errors are ignored here: this runs in destructors.
  if (jobs_) (void)cudaFree(jobs_);
  if (amax_tasks_) (void)cudaFree(amax_tasks_);
  if (cast_tasks_) (void)cudaFree(cast_tasks_);
  jobs_ = nullptr;
  amax_tasks_ = cast_tasks_ = nullptr;
}

DeviceBatch::~DeviceBatch() { release(); }

DeviceBatch::DeviceBatch(DeviceBatch&& o) noexcept { *this = std::move(o); }

DeviceBatch& DeviceBatch::operator=(DeviceBatch&& o) noexcept {
  if (this != &o) {
    release();
    n_jobs_ = o.n_jobs_;
    jobs_ = o.jobs_;
    amax_tasks_ = o.amax_tasks_;
    cast_tasks_ = o.cast_tasks_;
    amax_groups_ = std::move(o.amax_groups_);
    cast_groups_ = std::move(o.cast_groups_);
    o.jobs_ = nullptr;
    o.amax_tasks_ = o.cast_tasks_ = nullptr;
    o.n_jobs_ = 0;
    o.amax_groups_.clear();
    o.cast_groups_.clear();
  }
  return *this;
}

void DeviceBatch::partial_amax(cudaStream_t stream) const {
  launch_partial_amax(jobs_, amax_tasks_, amax_groups_, stream);
}

void DeviceBatch::cast(cudaStream_t stream) const { launch_cast(jobs_, cast_tasks_, cast_groups_, stream); }

ScaleJob make_scale_job(const Plan& p, const float* amax, const float* amax_col, float* scale, float* scale_inv,
                        uint8_t* e8m0, uint8_t* e8m0_col) {
  if (p.recipe.scaling == Scaling::delayed)
    throw UsageError("fp8: delayed scaling takes its scale from the amax history (DelayedState)");
  ScaleJob j;
  j.cells = p.grid.size();
  j.col_cells = p.col_grid.size();
  j.scaling = static_cast<uint8_t>(p.recipe.scaling);
  j.format = static_cast<uint8_t>(p.recipe.format);
  j.input = static_cast<uint8_t>(p.input);
  j.mx_rule = static_cast<uint8_t>(p.recipe.mx_rule);
  j.pow2 = p.recipe.pow2;
  j.epsilon = p.recipe.amax_epsilon;
  j.amax = amax;
  j.amax_col = amax_col;
  j.scale = scale;
  j.scale_inv = scale_inv;
  j.e8m0 = e8m0;
  j.e8m0_col = e8m0_col;
  if (p.recipe.scaling != Scaling::mxfp8 || !e8m0_col) j.col_cells = 0;
  return j;
}

ScaleBatch::ScaleBatch(const std::vector<ScaleJob>& jobs) {
  std::vector<Task> tasks;
  for (size_t i = 0; i < jobs.size(); ++i) add_tasks(tasks, i, jobs[i].cells + jobs[i].col_cells, kScaleTaskItems);
  n_tasks_ = static_cast<uint32_t>(tasks.size());
  try {
    jobs_ = upload(jobs);
    tasks_ = upload(tasks);
  } catch (...) {
    if (jobs_) (void)cudaFree(jobs_);
    jobs_ = nullptr;
    throw;
  }
}

ScaleBatch::~ScaleBatch() {
  if (jobs_) (void)cudaFree(jobs_);
  if (tasks_) (void)cudaFree(tasks_);
}

void ScaleBatch::run(cudaStream_t stream) const { launch_scales(jobs_, tasks_, n_tasks_, stream); }

void batch_partial_amax(const fpg::fp8::FragmentJob* jobs, size_t n, cudaStream_t stream) {
  std::vector<DeviceJob> d;
  for (size_t i = 0; i < n; ++i) d.push_back(make_device_job(jobs[i]));
  DeviceBatch(d).partial_amax(stream);  // the table is freed after the launch (cudaFree waits for it)
}

void batch_cast(const fpg::fp8::FragmentJob* jobs, size_t n, cudaStream_t stream) {
  std::vector<DeviceJob> d;
  for (size_t i = 0; i < n; ++i) d.push_back(make_device_job(jobs[i]));
  DeviceBatch(d).cast(stream);
}

}  // namespace fpg::cuda::fp8
