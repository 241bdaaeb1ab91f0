#include "formats/dcp/torch_save/torch_save_writer.h"

#include <algorithm>

#include "core/printable.h"
#include "core/error.h"
#include "core/shape.h"
#include "formats/dcp/pickle/pickle_writer.h"
#include "formats/dcp/zip/zip_writer.h"

namespace fpg::dcp {
namespace {

void write_header_records(ZipWriter& zip, const std::string& data_pkl) {
  zip.write_record("data.pkl", data_pkl.data(), data_pkl.size());
  zip.write_record(".format_version", "1", 1);
  zip.write_record(".storage_alignment", "64", 2);
  zip.write_record("byteorder", "little", 6);
}

uint64_t checked_numel(const std::vector<uint64_t>& shape, uint64_t element_bytes) {
  uint64_t numel = 1;
  for (const uint64_t d : shape) {
    if (d != 0 && numel > (uint64_t{1} << 62) / d)
      throw UsageError("torch.save: tensor shape " + shape_string(shape) + " is too large");
    numel *= d;
  }
  if (numel > (uint64_t{1} << 62) / element_bytes)
    throw UsageError("torch.save: tensor shape " + shape_string(shape) + " is too large");
  return numel;
}

void int_tuple(PickleWriter& w, const std::vector<uint64_t>& v) {
  w.begin_tuple(v.size());
  for (const uint64_t x : v) w.integer(static_cast<int64_t>(x));
  w.end_tuple(v.size());
}

// A contiguous tensor over the whole storage data/<key>, pickled as torch's Tensor.__reduce_ex__ does.
void pickle_tensor(PickleWriter& w, const TorchDType& dtype, const std::vector<uint64_t>& shape, uint64_t numel,
                   const std::string& key) {
  // torch's contiguous strides count a zero-size dimension as one.
  std::vector<uint64_t> stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * std::max<uint64_t>(shape[i], 1);
  const bool typed = !dtype.storage_class.empty();
  w.global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
  const size_t nargs = typed ? 6 : 7;
  w.begin_tuple(nargs);
  w.begin_tuple(5);
  w.str("storage");
  if (typed) w.global("torch", dtype.storage_class);
  else w.global("torch.storage", "UntypedStorage");
  w.str(key);
  w.str("cpu");
  w.integer(static_cast<int64_t>(typed ? numel : numel * dtype.element_bytes));
  w.end_tuple(5);
  w.persistent_id();
  w.integer(0);  // storage offset
  int_tuple(w, shape);
  int_tuple(w, stride);
  w.boolean(false);  // requires_grad
  w.global("collections", "OrderedDict");  // backward hooks
  w.begin_tuple(0);
  w.end_tuple(0);
  w.reduce();
  if (!typed) w.global("torch", dtype.name);
  w.end_tuple(nargs);
  w.reduce();
}

const TorchDType& whole_byte_dtype(const TorchDType& dtype) {
  if (dtype.element_bytes == 0)
    throw UsageError("torch.save: dtype " + std::string(dtype.name) + " has no whole-byte elements");
  return dtype;
}

// torch.save of a tensor whose bytes come from `bytes` (FillBytes or BorrowBytes).
template <typename Bytes>
uint64_t write_tensor_archive(const ByteSink& sink, const TorchDType& dtype, const std::vector<uint64_t>& shape,
                              const Bytes& bytes, size_t block_bytes) {
  const std::string pkl = tensor_data_pickle(dtype, shape);
  const uint64_t nbytes = checked_numel(shape, dtype.element_bytes) * dtype.element_bytes;
  ZipWriter zip(sink);
  write_header_records(zip, pkl);
  zip.write_record("data/0", nbytes, bytes, block_bytes);
  zip.finish();
  return zip.bytes_written();
}

}  // namespace

std::string tensor_data_pickle(const TorchDType& dtype, const std::vector<uint64_t>& shape) {
  const uint64_t numel = checked_numel(shape, whole_byte_dtype(dtype).element_bytes);
  PickleWriter w;
  pickle_tensor(w, dtype, shape, numel, "0");
  return w.finish();
}

uint64_t write_torch_save_tensor(const ByteSink& sink, const TorchDType& dtype, const std::vector<uint64_t>& shape,
                                 const FillBytes& fill, size_t block_bytes) {
  return write_tensor_archive(sink, dtype, shape, fill, block_bytes);
}

uint64_t write_torch_save_tensor(const ByteSink& sink, const TorchDType& dtype, const std::vector<uint64_t>& shape,
                                 const BorrowBytes& borrow, size_t block_bytes) {
  return write_tensor_archive(sink, dtype, shape, borrow, block_bytes);
}

uint64_t write_torch_save_value(const ByteSink& sink, const Value& value) {
  // Storages are numbered in the order the pickle meets their tensors and written in that order.
  std::vector<const TensorValue*> storages;
  PickleWriter w;
  pickle_value(w, value, [&storages](PickleWriter& pw, const TensorValue& t) {
    const TorchDType* dtype = find_torch_dtype(t.torch_dtype);
    if (!dtype) throw UsageError("torch.save: tensor of unknown dtype " + quoted_name(t.torch_dtype));
    const uint64_t numel = checked_numel(t.shape, whole_byte_dtype(*dtype).element_bytes);
    if (t.data.size() != numel * dtype->element_bytes)
      throw UsageError("torch.save: tensor " + shape_string(t.shape) + " " + t.torch_dtype + " holds " +
                       std::to_string(t.data.size()) + " bytes, not " + std::to_string(numel * dtype->element_bytes));
    pickle_tensor(pw, *dtype, t.shape, numel, std::to_string(storages.size()));
    storages.push_back(&t);
  });
  ZipWriter zip(sink);
  write_header_records(zip, w.finish());
  for (size_t i = 0; i < storages.size(); ++i)
    zip.write_record("data/" + std::to_string(i), storages[i]->data.data(), storages[i]->data.size());
  zip.finish();
  return zip.bytes_written();
}

}  // namespace fpg::dcp
