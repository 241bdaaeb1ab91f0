// A checkpoint's bucket-layout optimizer state seen in model space: each param's state in a
// "optimizer/buffer<b>/bucket<k>/<state>" key is the slice at the param's offset in its bucket, so
// it can stand as "optimizer/<param>/<state>" with the param's shape — the key that layout `model`
// stores. `fpgather diff` compares checkpoints of different state layouts, bucket sizes or
// distributed optimizers this way (their bucket keys differ, their params' values must not).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/index.h"

namespace fpg::ckpt {

struct ViewedState {
  Key key;             // "optimizer/<param>/<state>", F32, the param's shape, kind master or optimizer_state
  uint32_t source = 0;  // the bucket key holding it (index into Index::keys)
  uint64_t offset = 0;  // where the param's element 0 lies in that key
};

// The params' states held in bucket keys, or nothing when the index does not record a `bucket` state
// layout with its layout and model documents (or they do not parse, or a bucket key is missing:
// validate reports those).
std::optional<std::vector<ViewedState>> bucket_state_view(const Index& index);

}  // namespace fpg::ckpt
