// A torch.save archive (the zip format torch has written since 1.6), read without Python.
//
// Records under one top-level folder ("archive/" when saved to a stream): data.pkl, the object
// pickled with protocol 2 and storages as persistent ids ('storage', storage class, key, location,
// numel); data/<key>, each storage's bytes; byteorder ("little", or absent in old archives: little).
// data.pkl is decoded with the torch_save allow-list; a tensor is the object
// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, hooks[,
// metadata]) or _rebuild_tensor_v3(..., hooks, dtype[, metadata]). Its elements are read from the
// storage record (CRC-checked), gathered into contiguous order when the stride is not contiguous.
// Refused: big-endian archives, storages whose record size differs from numel × element size,
// tensors reaching outside their storage, negative sizes or strides, dtypes without whole-byte
// elements for reading.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/byte_source.h"
#include "formats/dcp/pickle/pickle_reader.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/zip/zip_archive.h"

namespace fpg::dcp {

// What a _rebuild_tensor call in data.pkl describes.
struct TensorRecord {
  const TorchDType* dtype = nullptr;
  std::string storage_key;        // data/<key>
  uint64_t storage_bytes = 0;     // the storage's size as its persistent id declares it
  uint64_t storage_offset = 0;    // in elements
  std::vector<uint64_t> shape;
  std::vector<uint64_t> stride;   // in elements
  uint64_t numel() const;
  uint64_t nbytes() const { return numel() * dtype->element_bytes; }
  bool contiguous() const;        // row-major with no gaps (size-1 dimensions' strides ignored)
};

class TorchSaveArchive {
 public:
  // Reads the zip directory, byteorder and data.pkl of `source` (which must outlive the archive).
  // Throws fpg::FormatError naming the source.
  explicit TorchSaveArchive(const ByteSource& source, const PickleLimits& limits = {});

  const ZipArchive& zip() const { return zip_; }
  const PickleDocument& pickle() const { return pickle_; }
  const std::string& prefix() const { return prefix_; }  // "archive"

  // The tensor a rebuild_tensor object node describes (checked: dtype known, sizes and strides
  // non-negative, elements inside the storage, the storage record present with the declared size).
  TensorRecord tensor_record(PickleDocument::Ref node) const;

  // Reads the tensor's elements, contiguous, into `dst` (record.nbytes() bytes). The storage record is
  // CRC-checked; a non-contiguous or partial view is read through a buffer of the storage's size.
  void read_tensor(const TensorRecord& record, void* dst) const;

  // The zip entry holding the record's storage (its size and CRC-32).
  const ZipEntry& storage_entry(const TensorRecord& record) const;

  // The pickled object as a Value, tensors read into tensor values.
  Value to_value() const;

 private:
  const ByteSource& source_;
  ZipArchive zip_;
  std::string prefix_;
  PickleDocument pickle_;
};

// The tensor a DCP TORCH_SAVE tensor item holds: data.pkl must be exactly one tensor, viewing no more
// elements than its storage holds.
TensorRecord tensor_item_record(const TorchSaveArchive& archive);

}  // namespace fpg::dcp
