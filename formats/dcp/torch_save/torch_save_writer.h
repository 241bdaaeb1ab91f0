// torch.save written without Python: the archive torch.save(obj, stream) produces with its defaults
// (pickle protocol 2, the zip container of zip_writer.h, records data.pkl, .format_version "1",
// .storage_alignment "64", byteorder "little", data/0 for a tensor's storage, then version and
// serialization id).
//
// A tensor is pickled as torch pickles a contiguous CPU tensor that owns its whole storage:
// torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()), the storage a
// persistent id ('storage', torch.<Legacy>Storage, '0', 'cpu', numel); dtypes without a legacy storage
// class (uint16, the float8 types …) use _rebuild_tensor_v3(…, OrderedDict(), torch.<dtype>) with a
// torch.storage.UntypedStorage of nbytes. For the same tensor the archive is byte-identical to
// torch.save's. This is the item of DCP's TORCH_SAVE serialization; torch.load(weights_only=True)
// reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/dcp/byte_sink.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {

constexpr size_t kDefaultIoBlockBytes = size_t{8} << 20;

// The data.pkl of a contiguous tensor of `dtype` and `shape` (strides as torch computes them).
std::string tensor_data_pickle(const TorchDType& dtype, const std::vector<uint64_t>& shape);

// Writes torch.save(tensor) to `sink`; the tensor's bytes (numel × element size, little-endian,
// row-major) come from `fill` in blocks of at most `block_bytes`. Returns the archive's size.
// Throws fpg::UsageError for a dtype without whole-byte elements or a shape whose size overflows.
uint64_t write_torch_save_tensor(const ByteSink& sink, const TorchDType& dtype, const std::vector<uint64_t>& shape,
                                 const FillBytes& fill, size_t block_bytes = kDefaultIoBlockBytes);
// The same, its bytes lent by `borrow` in blocks of at most `block_bytes` and written from there.
uint64_t write_torch_save_tensor(const ByteSink& sink, const TorchDType& dtype, const std::vector<uint64_t>& shape,
                                 const BorrowBytes& borrow, size_t block_bytes = kDefaultIoBlockBytes);

// Writes torch.save(value) to `sink` (pickle_value's kinds); returns the size. Each tensor value
// inside is pickled as above over its own storage, data/0, data/1 … in the order the pickle meets
// them (as torch numbers storages), its bytes written after byteorder. fpg::UsageError for a tensor
// of an unknown dtype or whose bytes do not match its shape.
uint64_t write_torch_save_value(const ByteSink& sink, const Value& value);

}  // namespace fpg::dcp
