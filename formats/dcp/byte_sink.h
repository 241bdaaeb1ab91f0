// How the DCP writers move bytes: a sink takes an item's bytes in order, a fill callback supplies a
// tensor's bytes on request. Both let an item of any size pass through a bounded buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace fpg::dcp {

// Receives the next `size` bytes of the output; throws on a failed write.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Writes bytes [offset, offset + size) of the source into `dst`. Called with consecutive ranges,
// each at most the writer's block size; throws on a failed read.
using FillBytes = std::function<void(uint64_t offset, void* dst, size_t size)>;

}  // namespace fpg::dcp
