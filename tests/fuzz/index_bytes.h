// A compact byte encoding of a checkpoint index (its tables and documents): the input of the
// fuzz_ckpt_index_tables target, so that every mutation of the fuzzer lands in a field of the index
// rather than in HDF5's file structure. Little-endian, in this order:
//   u32 major, u32 minor, str16 producer,
//   u32 n × (str16 name, str32 text)                         documents
//   u32 n × (str16 name, u8 dtype, u8 kind, u8 ndim, ndim × u64)  keys
//   u32 n × (str16 name, u32 rank, u64 size)                  files
//   u32 n × (u32 file, dataset, key, chunk_elems, u64 lo, numel, u8 dtype, u8 filters)  runs
//   u32 n × (u32 run, length, u64 offset, u32 stored_bytes, flags, u64 xxh3 stored, logical)  chunks
//   u32 n × (u32 key, u64 lo, u64 hi)                          padding
// where strN is an N-bit length then that many bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ckpt/index.h"

namespace fpg::fuzz {

std::vector<uint8_t> encode_index(const ckpt::Index& index);

// Any bytes decode: a count is capped by the bytes left, bytes past the end read as zeros, dtype and
// kind codes are taken modulo the number of codes. nullopt where read_index would refuse the index
// (a version it does not read, a run or chunk whose end overflows 64 bits), so every index returned
// is one that read_index could have returned.
std::optional<ckpt::Index> decode_index(const uint8_t* data, size_t size);

}  // namespace fpg::fuzz
