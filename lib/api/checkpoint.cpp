// fpgather/checkpoint.h over the readers `fpgather validate` and `fpgather inspect` use: formats/fpckpt
// for fpgather's checkpoints, formats/dcp for PyTorch DCP and Megatron torch_dist.
#include <fpgather/checkpoint.h>

#include "api/boundary.h"
#include "app/convert/checkpoint_export.h"
#include "ckpt/key.h"
#include "ckpt/problem.h"
#include "core/dtype.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/summary.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/validate.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/summary.h"
#include "formats/fpckpt/validate.h"

namespace fpgather {
namespace {

std::vector<Problem> public_problems(const std::vector<fpg::ckpt::Problem>& problems) {
  std::vector<Problem> out;
  for (const auto& p : problems) {
    Problem q;
    q.kind = std::string(fpg::ckpt::problem_kind_name(p.kind));
    q.tensor = p.key;
    q.lo = p.lo;
    q.hi = p.hi;
    q.file = p.file;
    q.message = p.message;
    q.text = fpg::ckpt::to_string(p);
    out.push_back(std::move(q));
  }
  return out;
}

ValidationReport validate_fpckpt(const std::string& path, const ValidateOptions& options) {
  fpg::fpckpt::ValidateOptions o;
  o.data = options.data;
  const fpg::fpckpt::ValidateReport rep = fpg::fpckpt::validate_checkpoint(path, o);
  ValidationReport r;
  r.readable = rep.readable;
  r.valid = rep.readable && rep.problems.empty();
  r.data_checked = options.data && rep.readable;
  r.layout_checked = rep.layout_checked;
  r.tensors = rep.keys;
  r.chunks = rep.chunks;
  r.files = rep.files;
  r.chunks_read = rep.chunks_read;
  r.bytes_read = rep.bytes_read;
  r.problems = public_problems(rep.problems);
  return r;
}

// DCP's rules and the mapping to parameters, as `fpgather validate` runs them.
ValidationReport validate_dcp(const std::string& path, const ValidateOptions& options) {
  const fpg::dcp::Reader reader(path);
  fpg::dcp::ValidateOptions o;
  o.data = options.data;
  const fpg::dcp::ValidationReport rep = fpg::dcp::validate_with_params(reader, o);
  ValidationReport r;
  r.valid = rep.ok();
  r.data_checked = options.data;
  r.tensors = rep.tensors;
  r.chunks = rep.chunks;
  r.chunks_read = rep.items_read;
  r.bytes_read = rep.bytes_read;
  r.problems = public_problems(rep.problems);
  return r;
}

CheckpointSummary inspect_fpckpt(const std::string& path) {
  const fpg::fpckpt::CheckpointReader reader(path, fpg::fpckpt::ChunkReads::direct, fpg::fpckpt::IndexCheck::report);
  const fpg::fpckpt::Summary s = fpg::fpckpt::summarize(reader.index());
  CheckpointSummary c;
  c.path = reader.dir();
  c.format = CheckpointFormat::fpgather;
  c.format_version = s.format_version;
  c.producer = s.producer;
  c.step = s.step_count;
  if (s.dp) c.dp = static_cast<uint32_t>(*s.dp);
  c.model = s.model;
  c.layout = s.layout;
  c.optimizer = s.optimizer;
  c.fp8 = s.fp8;
  c.files = s.files;
  c.bytes = s.total.logical_bytes;
  c.stored_bytes = s.total.stored_bytes;
  for (const auto& k : s.keys) {
    TensorSummary t;
    t.name = k.name;
    t.kind = std::string(fpg::ckpt::kind_name(k.kind));
    t.dtype = std::string(fpg::dtype_name(k.dtype));
    t.shape = k.shape;
    t.numel = k.numel;
    t.bytes = k.logical_bytes;
    t.stored_bytes = k.stored_bytes;
    t.chunks = k.chunks;
    c.tensors.push_back(std::move(t));
  }
  return c;
}

CheckpointSummary inspect_dcp(const std::string& path) {
  const fpg::dcp::Reader reader(path);
  const fpg::dcp::Summary s = fpg::dcp::summarize(reader);
  CheckpointSummary c;
  c.path = reader.dir();
  c.format = reader.megatron() ? CheckpointFormat::megatron_torch_dist : CheckpointFormat::torch_dcp;
  c.format_version = s.dcp_version.value_or("");
  std::unique_ptr<fpg::dcp::DcpParams> params;
  if (fpg::dcp::check_param_mapping(reader, &params).empty() && params) {
    c.optimizer = std::string(fpg::dcp::optimizer_form_name(params->optimizer_form()));
    if (params->layout()) {
      c.dp = params->dp();
      c.dp_is_smallest = params->dp_is_smallest();
    }
  }
  c.files = s.files.size();
  c.bytes = s.tensor_bytes;
  c.stored_bytes = s.stored_bytes;
  for (const auto& k : s.keys) {
    TensorSummary t;
    t.name = k.fqn;
    t.kind = k.is_tensor ? "tensor" : "bytes";
    const fpg::dcp::TorchDType* torch = k.is_tensor ? fpg::dcp::find_torch_dtype(k.dtype) : nullptr;
    t.dtype = torch && torch->dtype ? std::string(fpg::dtype_name(*torch->dtype)) : k.dtype;
    t.shape = k.shape;
    t.numel = k.is_tensor ? 1 : 0;
    for (uint64_t d : k.shape) t.numel *= d;
    t.bytes = k.bytes;
    t.stored_bytes = k.stored_bytes;
    t.chunks = k.chunks;
    c.tensors.push_back(std::move(t));
  }
  return c;
}

}  // namespace

const char* format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::fpgather: return "fpgather";
    case CheckpointFormat::torch_dcp: return "torch_dcp";
    case CheckpointFormat::megatron_torch_dist: return "megatron_torch_dist";
  }
  return "?";
}

Checkpoint Checkpoint::open(const std::string& path) {
  return api::at_boundary([&] {
    if (fpg::dcp::is_dcp_directory(path)) {
      const fpg::dcp::Reader reader(path);
      return Checkpoint(reader.dir(),
                        reader.megatron() ? CheckpointFormat::megatron_torch_dist : CheckpointFormat::torch_dcp);
    }
    if (fpg::app::convert::is_checkpoint(path))
      return Checkpoint(fpg::fpckpt::resolve_checkpoint(path), CheckpointFormat::fpgather);
    throw fpg::FormatError(path + ": not a checkpoint: no " + fpg::fpckpt::kIndexFile + " or " +
                           fpg::fpckpt::kLatestFile + " (fpgather), no " + fpg::dcp::kMetadataFileName +
                           " (PyTorch DCP, Megatron torch_dist)");
  });
}

ValidationReport Checkpoint::validate(const ValidateOptions& options) const {
  return api::at_boundary([&] {
    return format_ == CheckpointFormat::fpgather ? validate_fpckpt(path_, options) : validate_dcp(path_, options);
  });
}

CheckpointSummary Checkpoint::inspect() const {
  return api::at_boundary(
      [&] { return format_ == CheckpointFormat::fpgather ? inspect_fpckpt(path_) : inspect_dcp(path_); });
}

}  // namespace fpgather
