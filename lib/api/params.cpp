// fpgather/params.h over the per-parameter view diff and the exports read (ckpt::ParamSource, opened
// by app/convert's open_params for any format).
#include <fpgather/params.h>

#include <cstring>
#include <mutex>

#include "api/boundary.h"
#include "app/convert/checkpoint_params.h"
#include "core/dtype.h"
#include "core/error.h"

namespace fpgather {

struct ParamReader::Impl {
  std::string path;
  std::unique_ptr<fpg::ckpt::OpenedParams> opened;
  std::vector<ParamTensorInfo> tensors;
  // A source that does not declare concurrent reads keeps per-read state (open files, read-ahead):
  // callers on several threads take turns.
  mutable std::mutex serial;
};

ParamReader::ParamReader(const Checkpoint& checkpoint, const ParamReadOptions& options) {
  api::at_boundary([&] {
    auto impl = std::make_unique<Impl>();
    impl->path = checkpoint.path();
    impl->opened = fpg::app::convert::open_params(checkpoint.path(), "read it", options.validate);
    for (const auto& t : impl->opened->params().tensors()) {
      ParamTensorInfo i;
      i.name = t.name;
      i.param = t.param;
      i.role = t.role;
      i.dtype = std::string(fpg::dtype_name(t.dtype));
      i.shape = t.shape;
      i.numel = t.numel();
      i.bytes = fpg::dtype_bytes(t.dtype, i.numel);
      impl->tensors.push_back(std::move(i));
    }
    impl_ = std::move(impl);
  });
}

ParamReader::~ParamReader() = default;
ParamReader::ParamReader(ParamReader&&) noexcept = default;
ParamReader& ParamReader::operator=(ParamReader&&) noexcept = default;

const std::vector<ParamTensorInfo>& ParamReader::tensors() const { return impl_->tensors; }

std::size_t ParamReader::find(const std::string& name) const {
  return api::at_boundary([&]() -> std::size_t {
    for (std::size_t i = 0; i < impl_->tensors.size(); ++i)
      if (impl_->tensors[i].name == name) return i;
    throw fpg::UsageError(impl_->path + " holds no tensor '" + name + "' (NAME, NAME.master or NAME.<state>)");
  });
}

void ParamReader::read(std::size_t t, uint64_t lo, uint64_t hi, Span<uint8_t> out) const {
  api::at_boundary([&] {
    if (t >= impl_->tensors.size())
      throw fpg::UsageError("tensor " + std::to_string(t) + " of " + std::to_string(impl_->tensors.size()));
    const fpg::ckpt::ParamTensor& p = impl_->opened->params().tensors()[t];
    const uint64_t n = p.numel();
    if (lo > hi || hi > n)
      throw fpg::UsageError("'" + p.name + "': range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            ") is not within its " + std::to_string(n) + " elements");
    // Packed types smaller than a byte: a range must start on a byte.
    const int bits = fpg::dtype_bits(p.dtype);
    if (bits % 8 != 0 && (lo * static_cast<uint64_t>(bits)) % 8 != 0)
      throw fpg::UsageError("'" + p.name + "': a " + std::string(fpg::dtype_name(p.dtype)) +
                            " range must start on a byte (element " + std::to_string(lo) + ")");
    const uint64_t bytes = fpg::dtype_bytes(p.dtype, hi - lo);
    if (out.size() != bytes)
      throw fpg::UsageError("'" + p.name + "': elements [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            ") are " + std::to_string(bytes) + " bytes, the buffer holds " + std::to_string(out.size()));
    if (hi == lo) return;
    const fpg::ckpt::ParamSource& src = impl_->opened->params();
    if (src.concurrent_reads()) {
      src.read(t, lo, hi, out.data());
    } else {
      std::lock_guard<std::mutex> lock(impl_->serial);
      src.read(t, lo, hi, out.data());
    }
  });
}

std::vector<uint8_t> ParamReader::read(std::size_t t, uint64_t lo, uint64_t hi) const {
  std::vector<uint8_t> out;
  api::at_boundary([&] {
    if (t >= impl_->tensors.size())
      throw fpg::UsageError("tensor " + std::to_string(t) + " of " + std::to_string(impl_->tensors.size()));
    if (lo > hi) throw fpg::UsageError("range [" + std::to_string(lo) + ", " + std::to_string(hi) + ") is empty");
    const auto dtype = fpg::parse_dtype(impl_->tensors[t].dtype);
    out.resize(fpg::dtype_bytes(*dtype, hi - lo));
  });
  read(t, lo, hi, Span<uint8_t>(out.data(), out.size()));
  return out;
}

}  // namespace fpgather
