#include "formats/dcp/torch_save/torch_save.h"

#include <cstring>

#include "core/error.h"
#include "core/shape.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {

using Ref = PickleDocument::Ref;
using PKind = PickleDocument::Kind;

namespace {

constexpr uint64_t kMaxDataPkl = uint64_t{1} << 30;

bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  if (a != 0 && b > UINT64_MAX / a) return false;
  *out = a * b;
  return true;
}

}  // namespace

uint64_t TensorRecord::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // checked when the record was built
  return n;
}

bool TensorRecord::contiguous() const {
  if (numel() == 0) return true;
  uint64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

TorchSaveArchive::TorchSaveArchive(const ByteSource& source, const PickleLimits& limits)
    : source_(source), zip_(source) {
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : zip_.entries()) {
    const size_t slash = e.name.find('/');
    if (slash == std::string::npos || slash == 0 || e.name.compare(slash, std::string::npos, "/data.pkl") != 0)
      continue;
    if (pkl)
      throw FormatError(source.name() + ": torch.save archive holds two data.pkl records (" +
                        safetensors::quote_name(pkl->name) + ", " + safetensors::quote_name(e.name) + ")");
    pkl = &e;
    prefix_ = e.name.substr(0, slash);
  }
  if (!pkl) throw FormatError(source.name() + ": not a torch.save archive (no <folder>/data.pkl record)");
  if (const ZipEntry* bo = zip_.find(prefix_ + "/byteorder")) {
    const std::vector<uint8_t> v = zip_.read_all(*bo, 16);
    const std::string order(v.begin(), v.end());
    if (order == "big") throw FormatError(source.name() + ": big-endian torch.save archives are not supported");
    if (order != "little")
      throw FormatError(source.name() + ": byteorder record holds " + safetensors::quote_name(order));
  }
  const std::vector<uint8_t> bytes = zip_.read_all(*pkl, kMaxDataPkl);
  pickle_ = read_pickle(source.name() + " " + pkl->name, bytes.data(), bytes.size(),
                        AllowList::torch_save(), limits);
}

TensorRecord TorchSaveArchive::tensor_record(Ref node) const {
  const PickleDocument& d = pickle_;
  const std::string where = d.file();
  auto fail = [&](const std::string& what) -> FormatError { return FormatError(where + ": tensor " + what); };
  if (d.kind(node) != PKind::object || d.role(node) != GlobalRole::rebuild_tensor)
    throw FormatError(where + ": expected a tensor, found a " + d.type_name(node));
  const bool v3 = d.text(node) == "torch._utils._rebuild_tensor_v3";
  const Ref args = d.args(node);
  const size_t nargs = d.size(args);
  if (v3 ? (nargs != 7 && nargs != 8) : (nargs != 6 && nargs != 7))
    throw fail("rebuilt by " + d.text(node) + " with " + std::to_string(nargs) + " arguments");
  auto arg = [&](size_t i) { return d.item(args, i); };

  TensorRecord r;
  // Storage: persistent id ('storage', storage class, key, location, numel).
  const Ref storage = arg(0);
  if (d.kind(storage) != PKind::persistent_id) throw fail("storage is a " + d.type_name(storage));
  const Ref pid = d.persistent_id(storage);
  if (d.kind(pid) != PKind::tuple || d.size(pid) != 5 || d.kind(d.item(pid, 0)) != PKind::str ||
      d.text(d.item(pid, 0)) != "storage" || d.kind(d.item(pid, 1)) != PKind::global ||
      d.kind(d.item(pid, 2)) != PKind::str || d.kind(d.item(pid, 4)) != PKind::integer ||
      d.as_int(d.item(pid, 4)) < 0)
    throw fail("storage id is not ('storage', class, key, location, numel)");
  const std::string& cls = d.text(d.item(pid, 1));
  r.storage_key = d.text(d.item(pid, 2));
  const auto numel = static_cast<uint64_t>(d.as_int(d.item(pid, 4)));
  const bool untyped = cls == "torch.storage.UntypedStorage" || cls == "torch.UntypedStorage";
  if (v3) {
    if (!untyped) throw fail("rebuilt by _rebuild_tensor_v3 from a " + cls);
    const Ref dt = arg(6);
    const std::string prefix = "torch.";
    if (d.kind(dt) != PKind::global || d.text(dt).compare(0, prefix.size(), prefix) != 0 ||
        !(r.dtype = find_torch_dtype(d.text(dt).substr(prefix.size()))))
      throw fail("dtype is a " + d.type_name(dt));
    r.storage_bytes = numel;
  } else {
    const std::string prefix = "torch.";
    if (untyped) {
      r.dtype = find_torch_dtype("uint8");
    } else if (cls.compare(0, prefix.size(), prefix) == 0) {
      r.dtype = find_torch_dtype_by_storage(cls.substr(prefix.size()));
    }
    if (!r.dtype) throw fail("storage class " + safetensors::quote_name(cls) + " is not known");
    if (!mul_ok(numel, r.dtype->element_bytes, &r.storage_bytes))
      throw fail("storage of " + std::to_string(numel) + " elements overflows");
  }
  const Ref off = arg(1);
  if (d.kind(off) != PKind::integer || d.as_int(off) < 0) throw fail("storage offset is not an int >= 0");
  r.storage_offset = static_cast<uint64_t>(d.as_int(off));
  auto ints = [&](Ref t, const char* what) {
    if (d.kind(t) != PKind::tuple) throw fail(std::string(what) + " is a " + d.type_name(t) + ", not a tuple");
    std::vector<uint64_t> v(d.size(t));
    for (size_t i = 0; i < v.size(); ++i) {
      const Ref x = d.item(t, i);
      if (d.kind(x) != PKind::integer || d.as_int(x) < 0)
        throw fail(std::string(what) + " holds something other than an int >= 0");
      v[i] = static_cast<uint64_t>(d.as_int(x));
    }
    return v;
  };
  r.shape = ints(arg(2), "size");
  r.stride = ints(arg(3), "stride");
  if (r.stride.size() != r.shape.size())
    throw fail("has size " + shape_string(r.shape) + " and stride " + shape_string(r.stride));
  uint64_t n = 1;
  for (uint64_t s : r.shape)
    if (!mul_ok(n, s, &n)) throw fail("size " + shape_string(r.shape) + " overflows");
  uint64_t bytes = 0;
  if (!mul_ok(n, r.dtype->element_bytes, &bytes)) throw fail("size " + shape_string(r.shape) + " overflows");
  if (n > 0) {
    // Highest element the view touches, inside the storage.
    uint64_t last = r.storage_offset;
    for (size_t i = 0; i < r.shape.size(); ++i) {
      uint64_t span = 0;
      if (!mul_ok(r.shape[i] - 1, r.stride[i], &span) || last + span < last)
        throw fail("view overflows");
      last += span;
    }
    uint64_t end = 0;
    if (last == UINT64_MAX || !mul_ok(last + 1, r.dtype->element_bytes, &end) || end > r.storage_bytes)
      throw fail("of size " + shape_string(r.shape) + ", stride " + shape_string(r.stride) +
                 " at offset " + std::to_string(r.storage_offset) + " reaches outside its storage of " +
                 std::to_string(r.storage_bytes) + " bytes");
  }
  const ZipEntry* rec = zip_.find(prefix_ + "/data/" + r.storage_key);
  if (!rec) throw fail("storage record " + safetensors::quote_name(prefix_ + "/data/" + r.storage_key) + " is missing");
  if (rec->size != r.storage_bytes)
    throw fail("storage record " + safetensors::quote_name(rec->name) + " is " + std::to_string(rec->size) +
               " bytes; its storage declares " + std::to_string(r.storage_bytes));
  return r;
}

const ZipEntry& TorchSaveArchive::storage_entry(const TensorRecord& r) const {
  const ZipEntry* found = zip_.find(prefix_ + "/data/" + r.storage_key);
  if (!found || found->size != r.storage_bytes)
    throw InternalError(source_.name() + ": given a tensor record of another archive");
  return *found;
}

void TorchSaveArchive::read_tensor(const TensorRecord& r, void* dst) const {
  const ZipEntry& rec = storage_entry(r);
  const uint64_t nbytes = r.nbytes();
  const uint64_t es = r.dtype->element_bytes;
  if (r.contiguous() && r.storage_offset == 0 && nbytes == rec.size) {
    zip_.read(rec, dst);
    return;
  }
  const std::vector<uint8_t> storage = zip_.read_all(rec, rec.size);
  auto* out = static_cast<uint8_t*>(dst);
  if (nbytes == 0) return;
  if (r.contiguous()) {
    std::memcpy(out, storage.data() + r.storage_offset * es, nbytes);
    return;
  }
  // Odometer over all but the last dimension; the last dimension is copied element by element.
  const size_t nd = r.shape.size();
  std::vector<uint64_t> idx(nd, 0);
  const uint64_t inner = r.shape[nd - 1], inner_stride = r.stride[nd - 1] * es;
  uint64_t written = 0;
  while (written < nbytes) {
    uint64_t base = r.storage_offset;
    for (size_t i = 0; i + 1 < nd; ++i) base += idx[i] * r.stride[i];
    const uint8_t* src = storage.data() + base * es;
    for (uint64_t j = 0; j < inner; ++j) {
      std::memcpy(out + written, src + j * inner_stride, es);
      written += es;
    }
    for (size_t i = nd - 1; i-- > 0;) {
      if (++idx[i] < r.shape[i]) break;
      idx[i] = 0;
    }
  }
}

Value TorchSaveArchive::to_value() const {
  // A pickle may name one storage from many tensors; cap what unfolding can materialize.
  const uint64_t budget = 2 * source_.size() + (uint64_t{64} << 20);
  uint64_t used = 0;
  auto hook = [&](const PickleDocument& d, Ref node) -> std::optional<Value> {
    if (d.kind(node) != PKind::object || d.role(node) != GlobalRole::rebuild_tensor) return std::nullopt;
    const TensorRecord r = tensor_record(node);
    if (r.nbytes() > budget - used)
      throw FormatError(source_.name() + ": tensors of the pickled object exceed " +
                        std::to_string(budget) + " bytes");
    used += r.nbytes();
    auto t = std::make_shared<TensorValue>();
    t->torch_dtype = std::string(r.dtype->name);
    t->dtype = r.dtype->dtype;
    t->shape = r.shape;
    t->data.resize(static_cast<size_t>(r.nbytes()));
    read_tensor(r, t->data.data());
    return Value::tensor(std::move(t));
  };
  return pickle_.to_value(pickle_.root(), hook);
}

TensorRecord tensor_item_record(const TorchSaveArchive& archive) {
  TensorRecord r = archive.tensor_record(archive.pickle().root());
  // DCP saves each chunk as its own storage, so a chunk never needs more elements than its storage
  // holds. A view that does (a zero or overlapping stride) would turn a few stored bytes into as many
  // read as its size claims.
  if (r.nbytes() > r.storage_bytes)
    throw FormatError(archive.pickle().file() + ": tensor of size " + shape_string(r.shape) + " and stride " +
                      shape_string(r.stride) + " views " + std::to_string(r.numel()) + " elements (" +
                      std::to_string(r.nbytes()) + " bytes) of a storage of " + std::to_string(r.storage_bytes) +
                      " bytes: a tensor item may not repeat its storage's elements (zero or overlapping strides)");
  return r;
}

}  // namespace fpg::dcp
