// JSON form of the layouts, stored in every checkpoint index. Only the primary facts are written —
// options, buffer keys, bucket ranges, numel_unpadded, param slots, matrix owners; shards, fragments,
// padding and gather groups are recomputed on reading, after the structure is checked (check_buffer).
// So from_json(to_json(x)) == x, and a reader compares a stored layout with one it builds itself.
//
// Bucketed:
//   {"kind": "bucketed", "dp": 4, "bucket_size": null | N, "pad_for_nccl": false,
//    "buffers": [{"param_dtype": "BF16", "grad_dtype": "F32", "layer_wise": false, "numel": 1536,
//                 "buckets": [{"start": 0, "end": 1536, "numel_unpadded": 1516, "slots": [0, 4]}],
//                 "params": [{"index": 3, "name": "p3", "bucket": 0, "start": 0, "end": 10}, ...]}]}
// Layer-wise:
//   {"kind": "layer_wise", "dp": 4, "fp32_matrices": false,
//    "matrices": [{"index": 1, "name": "blocks.0.fc1.weight", "dtype": "BF16", "shape": [352, 48],
//                  "owner": 2}, ...],            registration order
//    "scalar": {bucketed layout of the other params}}
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "layout/bucketed_layout.h"
#include "layout/layer_wise_layout.h"

namespace fpg::layout {

// indent < 0: one line.
std::string to_json(const BucketedLayout& layout, int indent = -1);
std::string to_json(const LayerWiseLayout& layout, int indent = -1);
// The bucketed document as a JSON value, for a document that embeds it (no text in between).
nlohmann::json to_json_value(const BucketedLayout& layout);

// FormatError naming `source` and the field on malformed or inconsistent input.
BucketedLayout bucketed_layout_from_json(std::string_view text, const std::string& source);
LayerWiseLayout layer_wise_layout_from_json(std::string_view text, const std::string& source);

}  // namespace fpg::layout
