#include "formats/fpckpt/checkpoint.h"

#include <sys/stat.h>

#include <fmt/printf.h>

#include "ckpt/version.h"
#include "core/dtype.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/units.h"
#include "core/shape.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/diff.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/param_source.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/reshard_report.h"
#include "formats/fpckpt/summary.h"
#include "formats/fpckpt/validate.h"

namespace fpg::fpckpt {
namespace {

std::string mb(uint64_t bytes) { return byte_size(bytes); }

nlohmann::json sizes_json(const KindSizes& k) {
  return {{"keys", k.keys}, {"numel", k.numel}, {"logical_bytes", k.logical_bytes}, {"stored_bytes", k.stored_bytes},
          {"chunks", k.chunks}, {"padding_elements", k.padding_elems}};
}

std::string flags_text(uint32_t f) {
  std::string s;
  if (f & ckpt::kFilterShuffle) s += "shuffle+";
  s += (f & ckpt::kFilterZstd) ? "zstd" : "raw";
  return s;
}

// How far the checkpoint's own checksums vouch for it.
std::string integrity_text(const ckpt::Index& ix) {
  switch (ix.index_checksum) {
    case ckpt::IndexChecksum::mismatch: return "INDEX ALTERED: " + ix.index_checksum_detail;
    case ckpt::IndexChecksum::absent: return integrity_note(ix.version);
    case ckpt::IndexChecksum::verified: break;
  }
  return "index checksum verified, chunk checksums bound to key and offset";
}

struct Opened : ckpt::OpenedParams {
  Opened(const std::string& path, const ckpt::ParamsOptions& o)
      : reader(open_valid(path, o.refusing, o.validate)), source(*reader) {}
  const ckpt::ParamSource& params() const override { return source; }
  std::unique_ptr<CheckpointReader> reader;
  CheckpointParams source;
};

class FpckptCheckpoint : public ckpt::Checkpoint {
 public:
  explicit FpckptCheckpoint(std::string dir) : dir_(std::move(dir)) {}

  std::string_view format() const override { return "fpgather"; }
  const std::string& path() const override { return dir_; }

  ckpt::CheckpointSummary summary(const ckpt::SummaryOptions& o) const override {
    // An altered index is shown, not refused: inspect is where one looks at a broken checkpoint.
    const CheckpointReader r(dir_, ChunkReads::direct, IndexCheck::report);
    const ckpt::Index& ix = r.index();
    const Summary s = summarize(ix);
    ckpt::CheckpointSummary c;
    c.path = r.dir();
    c.format = "fpgather";
    c.format_version = s.format_version;
    c.producer = s.producer;
    c.step = s.step_count;
    if (s.dp) c.dp = static_cast<uint32_t>(*s.dp);
    c.model = s.model;
    c.layout = s.layout;
    c.optimizer = s.optimizer;
    c.fp8 = s.fp8;
    c.files = s.files;
    c.bytes = s.total.logical_bytes;
    c.stored_bytes = s.total.stored_bytes;
    for (const auto& k : s.keys)
      c.tensors.push_back({k.name, std::string(ckpt::kind_name(k.kind)), std::string(dtype_name(k.dtype)), k.shape,
                           k.numel, k.logical_bytes, k.stored_bytes, k.chunks});
    if (ix.index_checksum == ckpt::IndexChecksum::mismatch)
      c.warnings.push_back(r.dir() + "/" + kIndexFile + " does not match its checksum (" + ix.index_checksum_detail +
                           "): it was changed after it was written");

    nlohmann::json& j = c.document;
    j = {{"path", r.dir()}, {"format", "fpgather checkpoint"}, {"format_version", s.format_version},
         {"producer", s.producer}, {"index_checksum", std::string(ckpt::index_checksum_name(ix.index_checksum))},
         {"chunk_checksums_bound", ckpt::binds_chunk_checksums(ix.version)},
         {"step", s.step_count ? nlohmann::json(*s.step_count) : nlohmann::json()}, {"model", s.model_json},
         {"layout", s.layout_json}, {"optimizer", s.optimizer_json}, {"fp8", s.fp8_json}, {"documents", s.documents},
         {"files", s.files}, {"file_bytes", s.file_bytes}, {"runs", s.runs},
         {"compression_ratio", s.compression_ratio}, {"totals", sizes_json(s.total)}};
    j["by_kind"] = nlohmann::json::object();
    j["keys"] = nullptr;  // listed with --keys
    for (int k = 0; k < ckpt::kKeyKindCount; ++k)
      if (s.by_kind[k].keys) j["by_kind"][std::string(ckpt::kind_name(static_cast<ckpt::KeyKind>(k)))] = sizes_json(s.by_kind[k]);
    if (o.keys) {
      j["keys"] = nlohmann::json::array();
      for (const auto& kr : s.keys)
        j["keys"].push_back({{"name", kr.name}, {"kind", ckpt::kind_name(kr.kind)}, {"dtype", dtype_name(kr.dtype)},
                             {"shape", kr.shape}, {"numel", kr.numel}, {"chunks", kr.chunks},
                             {"padding_intervals", kr.padding_intervals}, {"padding_elements", kr.padding_elems},
                             {"logical_bytes", kr.logical_bytes}, {"stored_bytes", kr.stored_bytes}});
    }

    auto& t = c.text;
    // The documents' values (producer, model …) come from the file, as names do.
    auto line = [&t](const char* what, const std::string& v) {
      t.push_back(fmt::sprintf("%-12s %s", what, v.empty() ? "-" : printable(v)));
    };
    t.push_back(r.dir() + ": fpgather checkpoint");
    line("format", s.format_version);
    line("producer", s.producer);
    line("integrity", integrity_text(ix));
    line("step", s.step);
    line("model", s.model);
    line("layout", s.layout);
    line("optimizer", s.optimizer);
    line("fp8 recipe", s.fp8);
    std::string docs;
    for (const auto& d : s.documents) docs += (docs.empty() ? "" : ", ") + d;
    line("documents", docs);
    line("compression", fmt::sprintf("%.3fx (%s logical, %s stored)", s.compression_ratio, mb(s.total.logical_bytes),
                                     mb(s.total.stored_bytes)));
    line("files", plural(s.files, "data file") + ", " + mb(s.file_bytes) + ", " + plural(s.runs, "run"));
    t.push_back(fmt::sprintf("%-16s %6s %14s %14s %14s %8s %12s", "kind", "keys", "elements", "logical bytes",
                             "stored bytes", "chunks", "padding"));
    auto row = [&t](const std::string& name, const KindSizes& k) {
      t.push_back(fmt::sprintf("%-16s %6llu %14llu %14llu %14llu %8llu %12llu", name, k.keys, k.numel, k.logical_bytes,
                               k.stored_bytes, k.chunks, k.padding_elems));
    };
    for (int k = 0; k < ckpt::kKeyKindCount; ++k)
      if (s.by_kind[k].keys) row(std::string(ckpt::kind_name(static_cast<ckpt::KeyKind>(k))), s.by_kind[k]);
    row("total", s.total);
    if (o.keys) {
      std::vector<std::string> names;
      size_t width = 4;
      for (const auto& kr : s.keys) {
        names.push_back(printable(kr.name));
        width = std::max(width, names.back().size());
      }
      const int w = static_cast<int>(width);
      t.push_back("");
      t.push_back(fmt::sprintf("%-*s  %-15s  %-8s  %-16s  %7s  %9s  %12s", w, "key", "kind", "dtype", "shape", "chunks",
                               "padding", "stored"));
      for (size_t i = 0; i < s.keys.size(); ++i) {
        const auto& kr = s.keys[i];
        t.push_back(fmt::sprintf("%-*s  %-15s  %-8s  %-16s  %7llu  %9llu  %12llu", w, names[i],
                                 std::string(ckpt::kind_name(kr.kind)), std::string(dtype_name(kr.dtype)),
                                 shape_string(kr.shape), kr.chunks, kr.padding_elems, kr.stored_bytes));
      }
    }
    return c;
  }

  ckpt::KeyReport key(const std::string& name) const override {
    const CheckpointReader r(dir_, ChunkReads::direct, IndexCheck::report);
    const ckpt::Index& ix = r.index();
    const long k = r.find_key(name);
    if (k < 0) throw UsageError(r.dir() + ": no key named " + quoted_name(name));
    const ckpt::Key& key = ix.keys[k];
    const KeyDetail d = describe_key(ix, static_cast<uint32_t>(k));
    ckpt::KeyReport out;
    nlohmann::json& j = out.document;
    j = {{"key", key.name}, {"kind", ckpt::kind_name(key.kind)}, {"dtype", dtype_name(key.dtype)},
         {"shape", key.shape}, {"numel", key.numel()}, {"chunks", nlohmann::json::array()},
         {"padding", nlohmann::json::array()}};
    for (const auto& c : d.chunks)
      j["chunks"].push_back({{"lo", c.lo}, {"hi", c.hi}, {"file", c.file}, {"dataset", "/" + std::to_string(c.dataset)},
                             {"chunk", c.chunk ? nlohmann::json(*c.chunk) : nlohmann::json()},
                             {"stored_bytes", c.stored_bytes}, {"encoding", flags_text(c.flags)},
                             {"xxh3_stored", c.checksum_stored}, {"xxh3_logical", c.checksum_logical}});
    for (const auto& [lo, hi] : d.padding) j["padding"].push_back({{"lo", lo}, {"hi", hi}});
    auto& t = out.text;
    t.push_back(fmt::sprintf("%s: %s %s %s, %llu elements, %zu chunks, %zu padding intervals", printable(key.name),
                             std::string(ckpt::kind_name(key.kind)), std::string(dtype_name(key.dtype)),
                             shape_string(key.shape), key.numel(), d.chunks.size(), d.padding.size()));
    t.push_back(fmt::sprintf("%-24s  %-16s  %-12s  %12s  %-12s  %s", "range", "file", "location", "stored", "encoding",
                             "xxh3 stored/logical"));
    for (const auto& c : d.chunks) {
      const std::string range = "[" + std::to_string(c.lo) + ", " + std::to_string(c.hi) + ")";
      const std::string loc = "/" + std::to_string(c.dataset) + "#" + (c.chunk ? std::to_string(*c.chunk) : "?");
      t.push_back(fmt::sprintf("%-24s  %-16s  %-12s  %12u  %-12s  %016llx/%016llx", range, c.file.empty() ? "?" : printable(c.file),
                               loc, c.stored_bytes, flags_text(c.flags), c.checksum_stored, c.checksum_logical));
    }
    for (const auto& [lo, hi] : d.padding) t.push_back(fmt::sprintf("[%llu, %llu)  padding", lo, hi));
    return out;
  }

  ckpt::ValidationReport validate(const ckpt::ValidateOptions& o) const override {
    ValidateOptions vo;
    vo.data = o.data;
    vo.progress = o.progress;
    const ValidateReport rep = validate_checkpoint(dir_, vo);
    ckpt::ValidationReport r;
    r.path = rep.dir;
    r.format = "fpgather";
    r.readable = rep.readable;
    r.data_checked = o.data && rep.readable;
    r.layout_checked = rep.layout_checked;
    r.tensors = rep.keys;
    r.chunks = rep.chunks;
    r.files = rep.files;
    r.chunks_read = rep.chunks_read;
    r.bytes_read = rep.bytes_read;
    r.problems = rep.problems;
    if (const std::string note = integrity_note(rep.version); !note.empty()) r.notes.push_back(note);
    r.facts = {"format " + ckpt::to_string(rep.version), plural(rep.keys, "key"), plural(rep.chunks, "chunk"),
               plural(rep.padding, "padding interval"), plural(rep.files, "file")};
    if (rep.layout_checked) r.facts.push_back("layout checked");
    if (o.data) r.facts.push_back(plural(rep.chunks_read, "chunk") + " read");
    r.document = {{"format_version", ckpt::to_string(rep.version)},
                  {"layout_checked", rep.layout_checked},
                  {"index_checksum", std::string(ckpt::index_checksum_name(rep.index_checksum))},
                  {"chunk_checksums_bound", rep.chunk_checksums_bound},
                  {"keys", rep.keys},
                  {"chunks", rep.chunks},
                  {"padding_intervals", rep.padding},
                  {"files", rep.files},
                  {"chunks_read", rep.chunks_read},
                  {"bytes_read", rep.bytes_read}};
    return r;
  }

  std::unique_ptr<ckpt::OpenedParams> params(const ckpt::ParamsOptions& o) const override {
    return std::make_unique<Opened>(dir_, o);
  }

  std::optional<ckpt::DiffReport> diff_stored(const ckpt::Checkpoint& other, const ckpt::DiffOptions& o,
                                              bool validate) const override {
    const auto* b = dynamic_cast<const FpckptCheckpoint*>(&other);
    if (!b) return std::nullopt;
    const auto ra = open_valid(dir_, "compare it", validate);
    const auto rb = open_valid(b->dir_, "compare it", validate);
    return diff_checkpoints(*ra, *rb, o);
  }

  ckpt::ReshardReport reshard(const std::string& target, const ckpt::ReshardTarget& o) const override {
    return reshard_report(dir_, target, o);
  }

 private:
  std::string dir_;
};

class FpckptFormat : public ckpt::Format {
 public:
  std::string_view name() const override { return "fpgather"; }
  std::string_view signature() const override { return "index.h5 or latest (fpgather)"; }
  ckpt::Contents contents() const override { return ckpt::Contents::training_state; }
  bool probe(const std::string& path) const override {
    struct stat st {};
    return stat((path + "/" + kIndexFile).c_str(), &st) == 0 || stat((path + "/" + kLatestFile).c_str(), &st) == 0;
  }
  std::unique_ptr<ckpt::Checkpoint> open(const std::string& path) const override {
    return std::make_unique<FpckptCheckpoint>(resolve_checkpoint(path));
  }
};

}  // namespace

std::unique_ptr<ckpt::Format> make_format() { return std::make_unique<FpckptFormat>(); }

}  // namespace fpg::fpckpt
