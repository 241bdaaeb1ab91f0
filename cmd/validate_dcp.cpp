#include "validate_dcp.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "formats/dcp/dcp_params.h"

namespace fpg::cli {

int validate_dcp(const std::string& path, bool data, bool json) {
  const dcp::Reader reader(path);
  dcp::ValidateOptions o;
  o.data = data;
  std::unique_ptr<dcp::DcpParams> params;
  const dcp::ValidationReport rep = dcp::validate_with_params(reader, o, &params);
  uint64_t padding = 0;
  if (params)
    for (const auto& p : params->stored_padding()) padding += p.hi - p.lo;
  const int code = rep.ok() ? 0 : 1;
  const bool megatron = reader.megatron().has_value();
  if (json) {
    nlohmann::json j = {{"path", reader.dir()},
                        {"format", megatron ? "megatron_torch_dist" : "torch_dcp"},
                        {"valid", code == 0},
                        {"data_checked", data},
                        {"tensors", rep.tensors},
                        {"bytes_entries", rep.bytes_entries},
                        {"chunks", rep.chunks},
                        {"items_read", rep.items_read},
                        {"bytes_read", rep.bytes_read},
                        {"problems", nlohmann::json::array()}};
    if (params) {
      j["optimizer_form"] = std::string(dcp::optimizer_form_name(params->optimizer_form()));
      j["stored_padding_chunks"] = params->stored_padding().size();
      j["stored_padding_elements"] = padding;
    }
    for (const auto& p : rep.problems)
      j["problems"].push_back({{"kind", ckpt::problem_kind_name(p.kind)}, {"key", p.key}, {"lo", p.lo}, {"hi", p.hi},
                               {"file", p.file}, {"message", p.message}});
    std::printf("%s\n", j.dump(2).c_str());
    return code;
  }
  for (const auto& p : rep.problems) std::printf("%s\n", ckpt::to_string(p).c_str());
  if (params && !params->stored_padding().empty())
    std::printf("note: %zu stored chunks (%llu elements) are padding under the recovered %s layout: Megatron writes the "
                "gaps between parameters as data so that DCP's volume check passes\n",
                params->stored_padding().size(), static_cast<unsigned long long>(padding),
                std::string(dcp::optimizer_form_name(params->optimizer_form())).c_str());
  std::printf("%s: %s: %s, %llu tensor keys, %llu chunks, %llu bytes entries%s; %zu problem%s\n", reader.dir().c_str(),
              code == 0 ? "valid" : "INVALID", megatron ? "Megatron torch_dist" : "PyTorch DCP",
              static_cast<unsigned long long>(rep.tensors), static_cast<unsigned long long>(rep.chunks),
              static_cast<unsigned long long>(rep.bytes_entries),
              data ? (", " + std::to_string(rep.items_read) + " items read").c_str() : "", rep.problems.size(),
              rep.problems.size() == 1 ? "" : "s");
  return code;
}

}  // namespace fpg::cli
