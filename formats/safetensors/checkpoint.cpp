#include "formats/safetensors/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>

#include <fmt/printf.h>

#include "core/dtype.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/units.h"
#include "core/shape.h"
#include "formats/safetensors/model.h"

namespace fpg::safetensors {
namespace {

bool exists(const std::string& path, bool want_dir) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

// The whole pages of [p, p + n) of a file's map dropped from the process: what a streaming reader has
// copied out stays in the page cache but not in its resident set, which so stays a few reads, not the
// model (a page another thread still reads faults back in from the cache).
void release_pages(const uint8_t* p, uint64_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

// The pages of [p, p + n) asked of the disk at once, so that a cold read of a large range keeps the
// disk busy instead of faulting one read-ahead window at a time. In pieces of 1 MiB: Linux reads at
// most a read-ahead window (read_ahead_kb or max_sectors_kb, often 128 KiB and 1.25 MiB) per request
// and drops the rest of a longer one.
void ask_pages(const uint8_t* p, uint64_t n) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  constexpr uintptr_t kPiece = uintptr_t{1} << 20;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  for (uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page * page; lo < end; lo += std::min(kPiece, end - lo))
    ::madvise(reinterpret_cast<void*>(lo), std::min(kPiece, end - lo), MADV_WILLNEED);
}

// The tensors of a model as parameters: each a weight of its own name. The model is mapped from its
// files (Model::open): reads copy out of the map and release it.
class ModelParams : public ckpt::ParamSource {
 public:
  explicit ModelParams(std::shared_ptr<const Model> model) : model_(std::move(model)) {
    for (const auto& e : model_->tensors())
      tensors_.push_back({e.info->name, e.info->name, "weight", e.info->dtype, e.info->shape, {}});
  }
  std::string describe() const override { return "safetensors " + model_->path(); }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override {
    const Model::Entry& e = model_->tensors().at(t);
    if (lo > hi || hi > e.info->numel)
      throw FormatError(model_->reader(e).path() + ": " + e.info->name + ": elements [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + ") outside its " + std::to_string(e.info->numel));
    const uint64_t at = dtype_bytes(e.info->dtype, lo), n = dtype_bytes(e.info->dtype, hi) - at;
    if (!n) return;
    const uint8_t* from = model_->data(e) + at;
    ask_pages(from, n);
    std::memcpy(out, from, n);
    release_pages(from, n);
  }
  bool concurrent_reads() const override { return true; }

 private:
  std::shared_ptr<const Model> model_;
  std::vector<ckpt::ParamTensor> tensors_;
};

struct Opened : ckpt::OpenedParams {
  explicit Opened(std::shared_ptr<const Model> m) : source(std::move(m)) {}
  const ckpt::ParamSource& params() const override { return source; }
  ModelParams source;
};

// Reads [offset, offset + n) of `path` with pread (not through the map, so that a read error is a
// problem, not a signal); "" on success, else what went wrong.
std::string read_back(const std::string& path, uint64_t offset, uint64_t n, std::vector<uint8_t>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::string("cannot open: ") + std::strerror(errno);
  constexpr uint64_t kBlock = 8u << 20;
  buf.resize(static_cast<size_t>(std::min(n, kBlock)));
  std::string err;
  while (n && err.empty()) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    const ssize_t got = ::pread(fd, buf.data(), want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) err = std::string("read failed: ") + std::strerror(errno);
    else if (got == 0) err = "file ends at byte " + std::to_string(offset);
    offset += got > 0 ? static_cast<uint64_t>(got) : 0;
    n -= got > 0 ? static_cast<uint64_t>(got) : 0;
  }
  ::close(fd);
  return err;
}

class SafetensorsCheckpoint : public ckpt::Checkpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path) : model_(std::make_shared<const Model>(Model::open(path))) {}

  std::string_view format() const override { return "safetensors"; }
  const std::string& path() const override { return model_->path(); }

  ckpt::CheckpointSummary summary(const ckpt::SummaryOptions& o) const override {
    const Model& model = *model_;
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;  // dtype -> (tensors, bytes)
    uint64_t numel = 0;
    ckpt::CheckpointSummary c;
    c.path = model.path();
    c.format = "safetensors";
    c.files = model.shard_count();
    c.bytes = c.stored_bytes = model.total_bytes();
    for (const auto& e : model.tensors()) {
      auto& d = by_dtype[std::string(dtype_name(e.info->dtype))];
      d.first += 1;
      d.second += e.info->nbytes();
      numel += e.info->numel;
      c.tensors.push_back({e.info->name, "tensor", std::string(dtype_name(e.info->dtype)), e.info->shape,
                           e.info->numel, e.info->nbytes(), e.info->nbytes(), 1});
    }
    nlohmann::json& j = c.document;
    j["path"] = model.path();
    j["format"] = "safetensors";
    j["sharded"] = model.sharded();
    j["files"] = nlohmann::json::array();
    for (size_t s = 0; s < model.shard_count(); ++s)
      j["files"].push_back({{"path", model.shard(s).path()}, {"bytes", model.shard(s).file_size()},
                            {"header_bytes", model.shard(s).header_size()}});
    j["metadata"] = model.metadata();
    j["tensors"] = nlohmann::json::array();
    for (const auto& e : model.tensors()) {
      nlohmann::json t = {{"name", e.info->name}, {"dtype", dtype_name(e.info->dtype)}, {"shape", e.info->shape},
                          {"numel", e.info->numel}, {"bytes", e.info->nbytes()}};
      if (model.sharded()) t["file"] = model.shard(e.shard).path();
      j["tensors"].push_back(t);
    }
    j["totals"] = {{"tensors", model.size()}, {"numel", numel}, {"bytes", model.total_bytes()}};
    for (const auto& [dt, v] : by_dtype) j["totals"]["by_dtype"][dt] = {{"tensors", v.first}, {"bytes", v.second}};

    auto& t = c.text;
    t.push_back(fmt::sprintf("%s: safetensors, %s, %s, %llu elements, %s", model.path(), plural(model.shard_count(), "file"),
                             plural(model.size(), "tensor"), numel, byte_size(model.total_bytes())));
    if (!model.metadata().empty()) {
      t.push_back("metadata:");
      for (const auto& [k, v] : model.metadata()) t.push_back("  " + printable(k) + ": " + printable(v));
    }
    // Every tensor is listed whether or not keys are asked for: a model's tensors are what it holds.
    (void)o;
    std::vector<std::string> names;
    size_t width = 4;
    for (const auto& e : model.tensors()) {
      names.push_back(printable(e.info->name));
      width = std::max(width, names.back().size());
    }
    const int w = static_cast<int>(width);
    t.push_back(fmt::sprintf("%-*s  %-8s  %-20s  %12s%s", w, "name", "dtype", "shape", "bytes",
                             model.sharded() ? "  file" : ""));
    for (size_t n = 0; n < model.tensors().size(); ++n) {
      const auto& e = model.tensors()[n];
      std::string file;
      if (model.sharded()) {
        const std::string& p = model.shard(e.shard).path();
        file = "  " + printable(p.substr(p.find_last_of('/') + 1));
      }
      t.push_back(fmt::sprintf("%-*s  %-8s  %-20s  %12llu%s", w, names[n], std::string(dtype_name(e.info->dtype)),
                               shape_string(e.info->shape), e.info->nbytes(), file));
    }
    t.push_back("totals by dtype:");
    for (const auto& [dt, v] : by_dtype)
      t.push_back(fmt::sprintf("  %-8s %6llu tensors %14llu bytes", dt, v.first, v.second));
    return c;
  }

  ckpt::KeyReport key(const std::string& name) const override {
    const Model::Entry* e = model_->find(name);
    if (!e) throw UsageError(model_->path() + ": no tensor named " + quoted_name(name));
    const Reader& r = model_->reader(*e);
    const TensorInfo& i = *e->info;
    ckpt::KeyReport out;
    out.document = {{"key", i.name}, {"dtype", dtype_name(i.dtype)}, {"shape", i.shape}, {"numel", i.numel},
                    {"file", r.path()}, {"offset", r.data_offset() + i.begin}, {"bytes", i.nbytes()}};
    out.text.push_back(fmt::sprintf("%s: %s %s, %llu elements, %llu bytes in %s at byte %llu", printable(i.name),
                                    std::string(dtype_name(i.dtype)), shape_string(i.shape), i.numel, i.nbytes(),
                                    r.path(), r.data_offset() + i.begin));
    return out;
  }

  ckpt::ValidationReport validate(const ckpt::ValidateOptions& o) const override {
    // Opening checked every header (strict JSON, dtypes, shapes, offsets covering the data exactly)
    // and, for shards, the index against them: what is left is the data itself.
    const Model& model = *model_;
    ckpt::ValidationReport r;
    r.path = model.path();
    r.format = "safetensors";
    r.data_checked = o.data;
    r.tensors = r.chunks = model.size();
    r.files = model.shard_count();
    if (o.data) {
      std::vector<uint8_t> buf;
      for (const auto& e : model.tensors()) {
        const Reader& f = model.reader(e);
        const std::string err = read_back(f.path(), f.data_offset() + e.info->begin, e.info->nbytes(), buf);
        if (!err.empty()) {
          ckpt::Problem p;
          p.kind = ckpt::ProblemKind::truncated_file;
          p.key = e.info->name;
          p.hi = e.info->numel;
          p.file = f.path();
          p.message = err;
          r.problems.push_back(std::move(p));
          continue;
        }
        r.chunks_read += 1;
        r.bytes_read += e.info->nbytes();
      }
      ckpt::sort_problems(r.problems);
    }
    r.facts = {"safetensors", ckpt::count_of(model.size(), "tensor"), ckpt::count_of(model.shard_count(), "file")};
    if (o.data) r.facts.push_back(std::to_string(r.chunks_read) + " tensors read");
    r.document = {{"tensors", model.size()}, {"files", model.shard_count()}, {"sharded", model.sharded()},
                  {"tensors_read", r.chunks_read}, {"bytes_read", r.bytes_read}};
    return r;
  }

  std::unique_ptr<ckpt::OpenedParams> params(const ckpt::ParamsOptions&) const override {
    return std::make_unique<Opened>(model_);
  }

 private:
  std::shared_ptr<const Model> model_;
};

// A file named as a model: .safetensors, or an index .json.
bool named_as_model(const std::string& path) {
  auto ends = [&](const std::string& suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".safetensors") || ends(".json");
}

// A regular file that starts as a safetensors file: an 8-byte little-endian header length, then '{'.
bool starts_as_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[9] = {};
  if (!in.read(reinterpret_cast<char*>(b), sizeof b)) return false;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | b[i];
  return n > 0 && b[8] == '{';
}

class SafetensorsFormat : public ckpt::Format {
 public:
  std::string_view name() const override { return "safetensors"; }
  std::string_view signature() const override {
    return "model.safetensors or model.safetensors.index.json (a safetensors model)";
  }
  std::string_view file_signature() const override { return "a .safetensors file or its index .json"; }
  ckpt::Contents contents() const override { return ckpt::Contents::model; }
  // A file named .safetensors or .json, or one that starts as a safetensors file does (the reader
  // says what is wrong with it), or a directory holding a model. Any other file is not a model.
  bool probe(const std::string& path) const override {
    if (exists(path, false)) return named_as_model(path) || starts_as_safetensors(path);
    return exists(path, true) && (exists(path + "/" + std::string(kIndexFileName), false) ||
                                  exists(path + "/model.safetensors", false));
  }

  std::unique_ptr<ckpt::Checkpoint> open(const std::string& path) const override {
    return std::make_unique<SafetensorsCheckpoint>(path);
  }
};

}  // namespace

std::unique_ptr<ckpt::Format> make_format() { return std::make_unique<SafetensorsFormat>(); }

}  // namespace fpg::safetensors
