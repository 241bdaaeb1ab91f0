#include "inspect_dcp.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/shape.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/summary.h"
#include "layout/describe.h"

namespace fpg::cli {
namespace {

std::string shape_text(const std::vector<uint64_t>& s) { return shape_string(s); }

int print_key(const dcp::Reader& r, const std::string& name, bool json) {
  const dcp::Entry& e = r.entry(name);
  nlohmann::json j = {{"key", e.fqn}, {"tensor", e.is_tensor}};
  if (!e.is_tensor) {
    const dcp::StorageEntry& s = r.storage(e);
    j["storage"] = {{"file", s.relative_path}, {"offset", s.offset}, {"length", s.length}};
    j["value"] = r.read_object(e).repr(2000);
  } else {
    j["dtype"] = std::string(e.tensor.dtype->name);
    j["shape"] = e.tensor.size;
    j["chunks"] = nlohmann::json::array();
    for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
      const dcp::StorageEntry& s = r.storage(e, c);
      j["chunks"].push_back({{"offsets", e.tensor.chunks[c].offsets}, {"sizes", e.tensor.chunks[c].sizes},
                             {"file", s.relative_path}, {"offset", s.offset}, {"length", s.length}});
    }
  }
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (!e.is_tensor) {
    std::printf("%s: bytes entry in %s at [%llu, +%llu)\n  %s\n", e.fqn.c_str(), j["storage"]["file"].get<std::string>().c_str(),
                static_cast<unsigned long long>(j["storage"]["offset"].get<uint64_t>()),
                static_cast<unsigned long long>(j["storage"]["length"].get<uint64_t>()), j["value"].get<std::string>().c_str());
    return 0;
  }
  std::printf("%s: %s %s, %zu chunk%s\n", e.fqn.c_str(), std::string(e.tensor.dtype->name).c_str(),
              shape_text(e.tensor.size).c_str(), e.tensor.chunks.size(), e.tensor.chunks.size() == 1 ? "" : "s");
  for (const auto& c : j["chunks"])
    std::printf("  offsets %-16s sizes %-16s %s [%llu, +%llu)\n", shape_text(c["offsets"].get<std::vector<uint64_t>>()).c_str(),
                shape_text(c["sizes"].get<std::vector<uint64_t>>()).c_str(), c["file"].get<std::string>().c_str(),
                static_cast<unsigned long long>(c["offset"].get<uint64_t>()),
                static_cast<unsigned long long>(c["length"].get<uint64_t>()));
  return 0;
}

}  // namespace

int inspect_dcp(const std::string& path, bool keys, const std::string& key, bool json) {
  const dcp::Reader reader(path);
  if (!key.empty()) return print_key(reader, key, json);
  const dcp::Summary s = dcp::summarize(reader);

  // The per-parameter view; a Megatron optimizer layout that cannot be recovered is shown, not fatal.
  std::unique_ptr<dcp::DcpParams> params;
  std::string not_recovered;
  try {
    params = std::make_unique<dcp::DcpParams>(reader);
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

  if (json) {
    nlohmann::json j = {{"path", reader.dir()},
                        {"format", s.format},
                        {"dcp_version", s.dcp_version ? nlohmann::json(*s.dcp_version) : nlohmann::json()},
                        {"serialization", s.serialization ? nlohmann::json(std::string(dcp::serialization_name(*s.serialization)))
                                                          : nlohmann::json()},
                        {"tensor_keys", s.tensors},
                        {"bytes_entries", s.bytes_entries},
                        {"chunks", s.chunks},
                        {"tensor_bytes", s.tensor_bytes},
                        {"stored_bytes", s.stored_bytes},
                        {"files", s.files}};
    if (s.megatron) j["megatron"] = {{"sharded_backend", s.megatron->sharded_backend},
                                     {"sharded_backend_version", s.megatron->sharded_backend_version.value_or(-1)}};
    if (params) {
      j["parameters"] = param_count;
      j["optimizer"] = {{"form", std::string(dcp::optimizer_form_name(params->optimizer_form()))}};
      if (params->layout()) {
        const auto& L = *params->layout();
        j["optimizer"]["dp"] = params->dp();
        j["optimizer"]["dp_is_smallest"] = params->dp_is_smallest();
        j["optimizer"]["pad_for_nccl"] = L.layout.pad_for_nccl;
        j["optimizer"]["buffers"] = L.layout.buffers.size();
        if (L.bucket_size_lo) j["optimizer"]["bucket_size_range"] = {*L.bucket_size_lo, L.bucket_size_hi ? nlohmann::json(*L.bucket_size_hi) : nlohmann::json()};
        j["optimizer"]["stored_padding_chunks"] = params->stored_padding().size();
        j["optimizer"]["stored_padding_elements"] = padding_elems;
      }
      j["unmapped_keys"] = params->unmapped_keys();
    } else {
      j["optimizer"] = {{"not_recovered", not_recovered}};
    }
    if (keys) {
      j["keys"] = nlohmann::json::array();
      for (const auto& k : s.keys)
        j["keys"].push_back({{"key", k.fqn}, {"tensor", k.is_tensor}, {"dtype", k.dtype}, {"shape", k.shape},
                             {"chunks", k.chunks}, {"bytes", k.bytes}, {"stored_bytes", k.stored_bytes}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }

  std::printf("%s: %s", reader.dir().c_str(), s.megatron ? "Megatron torch_dist" : "PyTorch DCP");
  if (s.megatron)
    std::printf(" (backend %s v%lld)", s.megatron->sharded_backend.c_str(),
                static_cast<long long>(s.megatron->sharded_backend_version.value_or(0)));
  std::printf(", DCP metadata %s", s.dcp_version ? s.dcp_version->c_str() : "(no version)");
  if (s.serialization) std::printf(", %s items", std::string(dcp::serialization_name(*s.serialization)).c_str());
  std::printf("\n  %zu data file%s, %.2f MB stored; %llu tensor keys (%llu chunks, %.2f MB), %llu bytes entries\n",
              s.files.size(), s.files.size() == 1 ? "" : "s", s.stored_bytes / 1e6,
              static_cast<unsigned long long>(s.tensors), static_cast<unsigned long long>(s.chunks), s.tensor_bytes / 1e6,
              static_cast<unsigned long long>(s.bytes_entries));
  if (params) {
    std::printf("  %zu parameters; optimizer state: %s", param_count, std::string(dcp::optimizer_form_name(params->optimizer_form())).c_str());
    if (params->layout()) {
      const auto& L = *params->layout();
      std::printf(" at dp %u%s, %zu buffer%s", params->dp(),
                  params->dp_is_smallest() ? " (the smallest the buckets allow: only the first ranks store any of them)" : "",
                  L.layout.buffers.size(), L.layout.buffers.size() == 1 ? "" : "s");
      if (L.bucket_size_lo)
        std::printf(", bucket_size in (%llu, %s]", static_cast<unsigned long long>(*L.bucket_size_lo),
                    L.bucket_size_hi ? std::to_string(*L.bucket_size_hi).c_str() : "inf");
      else
        std::printf(", one bucket per buffer");
      std::printf(", bucket ends padded to %s\n", L.layout.pad_for_nccl ? "lcm(dp, 128, 65536)" : "lcm(dp, 128)");
      std::printf("  stored padding: %zu chunks, %llu elements (Megatron writes the gaps as data)\n",
                  params->stored_padding().size(), static_cast<unsigned long long>(padding_elems));
    } else {
      std::printf("\n");
    }
    for (const auto& k : params->unmapped_keys()) std::printf("  not mapped to a parameter: %s\n", k.c_str());
  } else {
    std::printf("  optimizer layout not recovered: %s\n", not_recovered.c_str());
  }
  if (keys) {
    size_t width = 3;
    for (const auto& k : s.keys) width = std::max(width, k.fqn.size());
    std::printf("%-*s  %-10s  %-16s  %7s  %12s\n", static_cast<int>(width), "key", "dtype", "shape", "chunks", "bytes");
    for (const auto& k : s.keys)
      std::printf("%-*s  %-10s  %-16s  %7zu  %12llu\n", static_cast<int>(width), k.fqn.c_str(),
                  k.is_tensor ? k.dtype.c_str() : "(bytes)", k.is_tensor ? shape_text(k.shape).c_str() : "", k.chunks,
                  static_cast<unsigned long long>(k.bytes));
  } else if (params && params->layout()) {
    std::printf("%s", layout::describe(params->layout()->layout).c_str());
  }
  return 0;
}

}  // namespace fpg::cli
