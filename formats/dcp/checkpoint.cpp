#include "formats/dcp/checkpoint.h"

#include <algorithm>
#include <map>

#include <fmt/printf.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/shape.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/megatron/megatron_common_state.h"
#include "formats/dcp/megatron/parallel_report.h"
#include "formats/dcp/megatron/reshard_report.h"
#include "formats/dcp/param_writer.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/megatron/integrity_manifest.h"
#include "formats/dcp/summary.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/validate.h"
#include "layout/describe.h"

namespace fpg::dcp {
namespace {

// More than one optimizer group: saved at model parallelism, shown group by group (one group reads
// as the data-parallel-only checkpoint it is).
bool model_parallel(const DcpParams& p) { return p.groups().size() > 1; }

struct Opened : ckpt::OpenedParams {
  // A state of another shape than its parameter is refused even without validation: reading per
  // parameter would leave it out.
  Opened(std::shared_ptr<const Reader> r, const ckpt::ParamsOptions& o) : reader(std::move(r)), source(checked(*reader, o)) {
    require_no_shape_mismatch(source, o.refusing);
  }
  static const Reader& checked(const Reader& r, const ckpt::ParamsOptions& o) {
    if (o.validate) require_valid(r, o.refusing);
    return r;
  }
  const ckpt::ParamSource& params() const override { return source; }
  std::shared_ptr<const Reader> reader;
  DcpParams source;
};

// Megatron's integrity.json, where the checkpoint has one: each listed file present, with data each
// file's SHA-256 compared; a manifest that cannot be read is a problem (Megatron's load with
// verify_integrity would refuse the checkpoint), never an error of the whole validation.
void check_integrity_manifest(const CheckpointDir& dir, bool data, ckpt::ValidationReport& r) {
  std::optional<IntegrityManifest> m;
  try {
    m = read_integrity_manifest(dir);
  } catch (const FormatError& e) {
    ckpt::Problem p;
    p.kind = ckpt::ProblemKind::checksum;
    p.file = kIntegrityFile;
    p.message = std::string("not a usable integrity manifest: ") + e.what();
    r.problems.push_back(std::move(p));
    r.document["integrity"] = {{"manifest", kIntegrityFile}, {"error", e.what()}};
    return;
  }
  if (!m) return;
  const IntegrityCheck c = check_integrity(dir, *m, data);
  r.problems.insert(r.problems.end(), c.problems.begin(), c.problems.end());
  r.facts.push_back(fmt::sprintf("%s: %s%s", kIntegrityFile, ckpt::count_of(m->files.size(), "file"),
                                 data ? " SHA-256 checked" : " listed"));
  if (!data) r.notes.push_back(std::string(kIntegrityFile) + " lists " + ckpt::count_of(m->files.size(), "file") +
                               " with SHA-256 digests: validate --data checks them");
  for (const std::string& u : c.unlisted)
    r.notes.push_back("not listed in " + std::string(kIntegrityFile) + " (written after it, or added): " + printable(u));
  r.document["integrity"] = {{"manifest", kIntegrityFile},    {"algorithm", m->algorithm},
                             {"files", m->files.size()},      {"files_present", c.files},
                             {"hashed", data},                {"bytes_hashed", c.bytes},
                             {"problems", c.problems.size()}, {"unlisted", c.unlisted}};
}

class DcpCheckpoint : public ckpt::Checkpoint {
 public:
  explicit DcpCheckpoint(const std::string& path) : reader_(std::make_shared<const Reader>(path)) {}

  std::string_view format() const override { return reader_->megatron() ? "megatron_torch_dist" : "torch_dcp"; }
  const std::string& path() const override { return reader_->dir(); }

  ckpt::CheckpointSummary summary(const ckpt::SummaryOptions& o) const override {
    const Reader& reader = *reader_;
    const Summary s = summarize(reader);
    // The per-parameter view; a Megatron optimizer layout that cannot be recovered is shown, not fatal.
    std::unique_ptr<DcpParams> params;
    std::string not_recovered;
    try {
      params = std::make_unique<DcpParams>(reader);
    } catch (const UnsupportedError& e) {
      not_recovered = e.what();
    } catch (const Error& e) {
      if (e.code() != ExitCode::check_failed) throw;
      not_recovered = e.what();
    }
    size_t param_count = 0;
    uint64_t padding_elems = 0;
    if (params) {
      for (const auto& t : params->tensors()) param_count += t.role == "weight";
      for (const auto& p : params->stored_padding()) padding_elems += p.hi - p.lo;
    }

    ckpt::CheckpointSummary c;
    c.path = reader.dir();
    c.format = std::string(format());
    c.format_version = s.dcp_version.value_or("");
    if (params) {
      c.optimizer = std::string(optimizer_form_name(params->optimizer_form()));
      if (params->layout()) {
        c.dp = params->dp();
        c.dp_is_smallest = params->dp_is_smallest();
      }
    }
    c.files = s.files.size();
    c.bytes = s.tensor_bytes;
    c.stored_bytes = s.stored_bytes;
    for (const auto& k : s.keys) {
      ckpt::TensorSummary t;
      t.name = k.fqn;
      t.kind = k.is_tensor ? "tensor" : "bytes";
      const TorchDType* torch = k.is_tensor ? find_torch_dtype(k.dtype) : nullptr;
      t.dtype = torch && torch->dtype ? std::string(dtype_name(*torch->dtype)) : k.dtype;
      t.shape = k.shape;
      t.numel = k.is_tensor ? 1 : 0;
      for (uint64_t d : k.shape) t.numel *= d;
      t.bytes = k.bytes;
      t.stored_bytes = k.stored_bytes;
      t.chunks = k.chunks;
      c.tensors.push_back(std::move(t));
    }

    nlohmann::json& j = c.document;
    j = {{"path", reader.dir()},
         {"format", s.format},
         {"dcp_version", s.dcp_version ? nlohmann::json(*s.dcp_version) : nlohmann::json()},
         {"serialization", s.serialization ? nlohmann::json(std::string(serialization_name(*s.serialization)))
                                           : nlohmann::json()},
         {"tensor_keys", s.tensors},
         {"bytes_entries", s.bytes_entries},
         {"chunks", s.chunks},
         {"tensor_bytes", s.tensor_bytes},
         {"stored_bytes", s.stored_bytes},
         {"files", s.files},
         {"metadata_files", reader.metadata_files()},
         {"metadata_source", reader.metadata_source() == MetadataSource::metadata     ? ".metadata"
                             : reader.metadata_source() == MetadataSource::rank_local ? "rank_local"
                                                                                       : "hf_distributed"},
         {"transforms", s.transforms}};
    // Members a checkpoint lacks are null, never left out (man/json/inspect.schema.json).
    for (const char* m : {"megatron", "training", "parameters", "parallel", "model_keys", "unmapped_keys", "unsupported_dtypes",
                          "shape_mismatches", "keys"})
      j[m] = nullptr;
    if (s.megatron)
      j["megatron"] = {{"sharded_backend", s.megatron->sharded_backend},
                       {"sharded_backend_version", s.megatron->sharded_backend_version ? nlohmann::json(*s.megatron->sharded_backend_version) : nlohmann::json()}};
    // Megatron's common state (iteration, saved args): shown, never fatal to the summary.
    std::optional<MegatronCommonState> common;
    std::string common_unread;
    if (s.megatron) {
      try {
        common = read_common_state(reader);
      } catch (const FormatError& e) {
        common_unread = e.what();
      }
      if (common) j["training"] = common_state_json(*common);
      else if (!common_unread.empty()) j["training"] = {{"not_read", common_unread}};
    }
    if (params) {
      j["parameters"] = param_count;
      j["optimizer"] = {{"form", std::string(optimizer_form_name(params->optimizer_form()))}};
      if (params->layout()) {
        const auto& L = *params->layout();
        j["optimizer"]["dp"] = params->dp();
        j["optimizer"]["dp_is_smallest"] = params->dp_is_smallest();
        j["optimizer"]["pad_for_nccl"] = L.layout.pad_for_nccl;
        j["optimizer"]["buffers"] = L.layout.buffers.size();
        if (L.bucket_size_lo)
          j["optimizer"]["bucket_size_range"] = {*L.bucket_size_lo,
                                                 L.bucket_size_hi ? nlohmann::json(*L.bucket_size_hi) : nlohmann::json()};
        j["optimizer"]["stored_padding_chunks"] = params->stored_padding().size();
        j["optimizer"]["stored_padding_elements"] = padding_elems;
      }
      if (params->parallel()) j["parallel"] = parallel_json(reader, *params, true);
      if (reader.megatron())
        j["model_keys"] = {{"tp", params->model_tp()}, {"expert_tp", params->model_expert_tp()},
                           {"experts", params->experts()}};
      j["unmapped_keys"] = params->unmapped_keys();
      j["unsupported_dtypes"] = nlohmann::json::array();
      for (const auto& u : params->unsupported_dtypes())
        j["unsupported_dtypes"].push_back({{"key", u.key}, {"dtype", u.dtype}});
      j["shape_mismatches"] = nlohmann::json::array();
      for (const ShapeMismatch& m : params->shape_mismatches())
        j["shape_mismatches"].push_back({{"key", m.state_key}, {"shape", m.state_shape}, {"parameter", m.param},
                                         {"parameter_key", m.param_key}, {"parameter_shape", m.param_shape}});
    } else {
      j["optimizer"] = {{"not_recovered", not_recovered}};
    }
    if (o.keys) {
      j["keys"] = nlohmann::json::array();
      for (const auto& k : s.keys)
        j["keys"].push_back({{"key", k.fqn}, {"tensor", k.is_tensor}, {"dtype", k.dtype}, {"shape", k.shape},
                             {"chunks", k.chunks}, {"bytes", k.bytes}, {"stored_bytes", k.stored_bytes}});
    }

    auto& t = c.text;
    std::string head = reader.dir() + ": " + (s.megatron ? "Megatron torch_dist" : "PyTorch DCP");
    if (s.megatron)
      head += fmt::sprintf(" (backend %s v%lld)", s.megatron->sharded_backend,
                           static_cast<long long>(s.megatron->sharded_backend_version.value_or(0)));
    if (reader.metadata_source() == MetadataSource::hf_distributed)
      head += " of Hugging Face distributed shards";
    else
      head += ", DCP metadata " + (s.dcp_version ? *s.dcp_version : std::string("(no version)"));
    if (s.serialization) head += ", " + std::string(serialization_name(*s.serialization)) + " items";
    if (!s.transforms.empty()) {
      std::string list;
      for (const std::string& d : s.transforms) list += (list.empty() ? "" : ", ") + printable(d);
      head += (s.transforms.size() == 1 && s.transforms.front().rfind(std::string(kZstdTransform) + "/", 0) == 0
                   ? " compressed with zstd ("
                   : " through stream transforms (") +
              list + ")";
    }
    t.push_back(head);
    t.push_back(fmt::sprintf("  %zu data file%s, %.2f MB stored; %llu tensor keys (%llu chunks, %.2f MB), %llu bytes entries",
                             s.files.size(), s.files.size() == 1 ? "" : "s", s.stored_bytes / 1e6, s.tensors, s.chunks,
                             s.tensor_bytes / 1e6, s.bytes_entries));
    if (reader.metadata_source() == MetadataSource::hf_distributed)
      t.push_back(fmt::sprintf("  Hugging Face distributed shards: %s placed by DCP_SHARDING_INFO, read as one "
                               "(saved with save_distributed: no .metadata, no index)",
                               ckpt::count_of(reader.metadata_files().size(), "safetensors file")));
    else if (reader.metadata_source() == MetadataSource::rank_local)
      t.push_back(fmt::sprintf("  rank-local metadata: %s, read as one (saved without collectives: no .metadata)",
                               ckpt::count_of(reader.metadata_files().size(), "file")));
    if (common && !common_state_line(*common).empty()) t.push_back("  training state: " + common_state_line(*common));
    if (!common_unread.empty()) t.push_back("  training state not read: " + printable(common_unread));
    try {
      if (const auto m = read_integrity_manifest(reader.files())) {
        t.push_back(fmt::sprintf("  integrity manifest: %s, SHA-256 of %s (validate --data checks them)", kIntegrityFile,
                                 ckpt::count_of(m->files.size(), "file")));
        j["integrity"] = {{"manifest", kIntegrityFile}, {"algorithm", m->algorithm}, {"files", m->files.size()}};
      }
    } catch (const FormatError& e) {
      t.push_back("  integrity manifest not read: " + printable(e.what()));
      j["integrity"] = {{"manifest", kIntegrityFile}, {"error", e.what()}};
    }
    if (params) {
      std::string l = fmt::sprintf("  %zu parameters; optimizer state: %s", param_count,
                                   std::string(optimizer_form_name(params->optimizer_form())));
      if (model_parallel(*params)) {
        t.push_back(l + ", one optimizer group per model-parallel rank");
        for (const std::string& p : parallel_lines(reader, *params)) t.push_back(p);
        t.push_back(fmt::sprintf("  stored padding: %zu chunks, %llu elements (Megatron writes the gaps as data)",
                                 params->stored_padding().size(), padding_elems));
      } else if (params->layout()) {
        const auto& L = *params->layout();
        l += fmt::sprintf(" at dp %u%s, %zu buffer%s", params->dp(),
                          params->dp_is_smallest() ? " (the smallest the buckets allow: only the first ranks store any of them)" : "",
                          L.layout.buffers.size(), L.layout.buffers.size() == 1 ? "" : "s");
        if (L.bucket_size_lo)
          l += fmt::sprintf(", bucket_size in (%llu, %s]", *L.bucket_size_lo,
                            L.bucket_size_hi ? std::to_string(*L.bucket_size_hi) : std::string("inf"));
        else
          l += ", one bucket per buffer";
        l += fmt::sprintf(", bucket ends padded to %s", L.layout.pad_for_nccl ? "lcm(dp, 128, 65536)" : "lcm(dp, 128)");
        t.push_back(l);
        t.push_back(fmt::sprintf("  stored padding: %zu chunks, %llu elements (Megatron writes the gaps as data)",
                                 params->stored_padding().size(), padding_elems));
      } else {
        t.push_back(l);
      }
      if (!model_parallel(*params) && (params->model_tp() > 1 || params->model_expert_tp() > 1))
        t.push_back(fmt::sprintf("  model keys stored in TP %u pieces%s", params->model_tp(),
                                 params->experts() ? fmt::sprintf(" (experts: expert TP %u)", params->model_expert_tp())
                                                   : std::string()));
      if (params->experts()) t.push_back(fmt::sprintf("  %llu experts per MoE layer", params->experts()));
      for (const auto& k : params->unmapped_keys()) t.push_back("  not mapped to a parameter: " + printable(k));
      for (const auto& u : params->unsupported_dtypes())
        t.push_back("  dtype fpgather cannot represent: " + printable(u.key) + " (" + u.dtype +
                    "; compared byte for byte, not exported)");
      for (const ShapeMismatch& m : params->shape_mismatches())
        t.push_back("  not the shape of its parameter: " + to_string(m));
    } else {
      t.push_back("  optimizer layout not recovered: " + printable(not_recovered));
    }
    if (o.keys) {
      std::vector<std::string> names;
      size_t width = 3;
      for (const auto& k : s.keys) {
        names.push_back(printable(k.fqn));
        width = std::max(width, names.back().size());
      }
      const int w = static_cast<int>(width);
      t.push_back(fmt::sprintf("%-*s  %-10s  %-16s  %7s  %12s", w, "key", "dtype", "shape", "chunks", "bytes"));
      for (size_t i = 0; i < s.keys.size(); ++i) {
        const auto& k = s.keys[i];
        t.push_back(fmt::sprintf("%-*s  %-10s  %-16s  %7zu  %12llu", w, names[i], k.is_tensor ? printable(k.dtype) : "(bytes)",
                                 k.is_tensor ? shape_string(k.shape) : "", k.chunks, k.bytes));
      }
    } else if (params && model_parallel(*params)) {
      for (const std::string& l : group_layout_lines(*params, o.layouts)) t.push_back(l);
    } else if (params && params->layout()) {
      ckpt::append_lines(t, layout::describe(params->layout()->layout));
    }
    return c;
  }

  ckpt::KeyReport key(const std::string& name) const override {
    const Reader& r = *reader_;
    const Entry& e = r.entry(name);
    ckpt::KeyReport out;
    nlohmann::json& j = out.document;
    j = {{"key", e.fqn}, {"tensor", e.is_tensor}};
    auto& t = out.text;
    if (!e.is_tensor) {
      const StorageEntry& s = r.storage(e);
      const std::string value = r.read_object(e).repr(2000);
      j["storage"] = {{"file", s.relative_path}, {"offset", s.offset}, {"length", s.length}};
      j["value"] = value;
      t.push_back(fmt::sprintf("%s: bytes entry in %s at [%llu, +%llu)", printable(e.fqn), printable(s.relative_path),
                               s.offset, s.length));
      t.push_back("  " + printable(value));
      return out;
    }
    j["dtype"] = std::string(e.tensor.dtype->name);
    j["shape"] = e.tensor.size;
    j["chunks"] = nlohmann::json::array();
    t.push_back(fmt::sprintf("%s: %s %s, %zu chunk%s", printable(e.fqn), std::string(e.tensor.dtype->name),
                             shape_string(e.tensor.size), e.tensor.chunks.size(), e.tensor.chunks.size() == 1 ? "" : "s"));
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      const StorageEntry& s = r.storage(e, c);
      const auto& ch = e.tensor.chunks[c];
      j["chunks"].push_back({{"offsets", ch.offsets}, {"sizes", ch.sizes}, {"file", s.relative_path},
                             {"offset", s.offset}, {"length", s.length}});
      t.push_back(fmt::sprintf("  offsets %-16s sizes %-16s %s [%llu, +%llu)", shape_string(ch.offsets),
                               shape_string(ch.sizes), printable(s.relative_path), s.offset, s.length));
    }
    return out;
  }

  ckpt::ValidationReport validate(const ckpt::ValidateOptions& o) const override {
    const Reader& reader = *reader_;
    ValidateOptions vo;
    vo.data = o.data;
    std::unique_ptr<DcpParams> params;
    std::string unmapped;
    const ValidationReport rep = validate_with_params(reader, vo, &params, &unmapped);
    uint64_t padding = 0;
    if (params)
      for (const auto& p : params->stored_padding()) padding += p.hi - p.lo;
    const bool megatron = reader.megatron().has_value();
    ckpt::ValidationReport r;
    r.path = reader.dir();
    r.format = std::string(format());
    r.data_checked = o.data;
    r.layout_checked = params && params->layout();
    r.tensors = rep.tensors;
    r.chunks = rep.chunks;
    r.chunks_read = rep.items_read;
    r.bytes_read = rep.bytes_read;
    r.problems = rep.problems;
    if (!unmapped.empty()) r.notes.push_back("optimizer state not mapped to parameters (not checked against a layout): " + unmapped);
    if (params && !params->unsupported_dtypes().empty()) {
      std::string keys;
      for (const auto& u : params->unsupported_dtypes())
        keys += (keys.empty() ? "" : ", ") + quoted_name(u.key) + " (" + u.dtype + ")";
      r.notes.push_back(ckpt::count_of(params->unsupported_dtypes().size(), "key") +
                        " of a dtype fpgather cannot represent (compared byte for byte by diff, refused by convert): " + keys);
    }
    // Items behind a stream transform this reader does not decode: index-only validation cannot see
    // it; --data reports each as a problem.
    std::map<std::string, uint64_t> unread_transforms;
    for (const StorageEntry& st : reader.metadata().storage) {
      try {
        is_zstd_transform(st.transform_descriptors, "");
      } catch (const FormatError&) {
        std::string list;
        for (const std::string& d : st.transform_descriptors) list += (list.empty() ? "" : ", ") + quoted_name(d);
        ++unread_transforms[list];
      }
    }
    for (const auto& [list, n] : unread_transforms)
      r.notes.push_back(ckpt::count_of(n, "item") + " stored through stream transforms fpgather does not read (" + list +
                        "): reading them is refused");
    if (params && !params->stored_padding().empty())
      r.notes.push_back(fmt::sprintf("%zu stored chunks (%llu elements) are padding under the recovered %s layout: "
                                     "Megatron writes the gaps between parameters as data so that DCP's volume check passes",
                                     params->stored_padding().size(), padding,
                                     std::string(optimizer_form_name(params->optimizer_form()))));
    r.facts = {megatron ? "Megatron torch_dist" : "PyTorch DCP", std::to_string(rep.tensors) + " tensor keys",
               std::to_string(rep.chunks) + " chunks", std::to_string(rep.bytes_entries) + " bytes entries"};
    if (params && model_parallel(*params) && params->parallel())
      r.facts.push_back(parallel_sizes_string(*params->parallel()) + ", " + std::to_string(params->groups().size()) +
                        " optimizer groups");
    if (o.data) r.facts.push_back(std::to_string(rep.items_read) + " items read");
    r.document = {{"tensors", rep.tensors}, {"bytes_entries", rep.bytes_entries}, {"chunks", rep.chunks},
                  {"items_read", rep.items_read}, {"bytes_read", rep.bytes_read}};
    check_integrity_manifest(reader.files(), o.data, r);
    ckpt::sort_problems(r.problems);
    if (params) {
      r.document["optimizer_form"] = std::string(optimizer_form_name(params->optimizer_form()));
      r.document["stored_padding_chunks"] = params->stored_padding().size();
      r.document["stored_padding_elements"] = padding;
      // Sizes, groups and files; the groups' bucket layouts are inspect's (1M chunks: 5% of the work).
      if (params->parallel()) r.document["parallel"] = parallel_json(reader, *params, false);
    }
    return r;
  }

  std::unique_ptr<ckpt::OpenedParams> params(const ckpt::ParamsOptions& o) const override {
    return std::make_unique<Opened>(reader_, o);
  }

  ckpt::ReshardReport reshard(const std::string& target, const ckpt::ReshardTarget& o) const override {
    return megatron_reshard_report(reader_->dir(), target, o);
  }

 private:
  std::shared_ptr<const Reader> reader_;
};

class DcpFormat : public ckpt::Format {
 public:
  std::string_view name() const override { return "dcp"; }
  std::string_view signature() const override {
    return ".metadata or __<rank>.metadata (PyTorch DCP, Megatron torch_dist)";
  }
  ckpt::Contents contents() const override { return ckpt::Contents::framework_state; }
  bool probe(const std::string& path) const override { return is_dcp_directory(path); }
  std::unique_ptr<ckpt::Checkpoint> open(const std::string& path) const override {
    return std::make_unique<DcpCheckpoint>(path);
  }
  uint64_t write_params(const ckpt::ParamSource& source, const std::vector<ckpt::ExportTensor>& tensors,
                        const std::string& dir, const ckpt::ParamWriteOptions& options) const override {
    return dcp::write_params(source, tensors, dir, options);
  }
};

}  // namespace

std::unique_ptr<ckpt::Format> make_format() { return std::make_unique<DcpFormat>(); }

}  // namespace fpg::dcp
