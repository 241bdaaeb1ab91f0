// What `inspect` shows of a dp_reshardable Megatron checkpoint saved at model parallelism: the
// parallel sizes, which storage file holds which (tp, pp, ep, dp) rank, and each optimizer group's
// recovered buffer layout, as text lines and as JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

// "TP 2 × PP 2 × DP 1" (with ", EP 2 × expert TP 1 × expert DP 1" for MoE).
std::string parallel_sizes_string(const ParallelSizes& p);

// The parallel layout's summary lines (indented two spaces), without the groups' layouts.
std::vector<std::string> parallel_lines(const Reader& reader, const DcpParams& params);
// Each group's heading and, when `full`, its layout (layout::describe), for inspect's text.
std::vector<std::string> group_layout_lines(const DcpParams& params, bool full);
// The sizes, groups and rank files as JSON; each group's buffer layout too with `layouts`.
nlohmann::json parallel_json(const Reader& reader, const DcpParams& params, bool layouts);

}  // namespace fpg::dcp
