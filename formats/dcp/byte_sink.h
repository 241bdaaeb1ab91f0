// How the DCP writers move bytes: a sink takes an item's bytes in order; a fill callback copies a
// tensor's bytes into the writer's buffer on request, a borrow callback lends the writer a block its
// producer already holds (no copy, and its CRC-32 when the producer computed it). All let an item of
// any size pass through bounded memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace fpg::dcp {

// Receives the next `size` bytes of the output; throws on a failed write.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Writes bytes [offset, offset + size) of the source into `dst`. Called with consecutive ranges,
// each at most the writer's block size; throws on a failed read.
using FillBytes = std::function<void(uint64_t offset, void* dst, size_t size)>;

// Bytes a producer lends the writer: `size` bytes at `data`, and their CRC-32 (crc32.h, from 0) if known.
struct BorrowedBlock {
  const void* data = nullptr;
  size_t size = 0;
  std::optional<uint32_t> crc32;
};

// Lends bytes [offset, offset + size) of the source, which must stay valid and unchanged until the next
// call or until the write that called returns. Called with consecutive ranges, each at most the
// writer's block size; throws on a failed read.
using BorrowBytes = std::function<BorrowedBlock(uint64_t offset, size_t size)>;

}  // namespace fpg::dcp
