// fpgather/checkpoint.h over the use cases of `fpgather validate` and `fpgather inspect`
// (app/inspect), which open any format the build reads.
#include <fpgather/checkpoint.h>

#include "api/boundary.h"
#include "app/inspect/inspect.h"
#include "app/inspect/validate.h"
#include "core/error.h"

namespace fpgather {
namespace {

CheckpointFormat public_format(std::string_view name) {
  if (name == "fpgather") return CheckpointFormat::fpgather;
  if (name == "torch_dcp") return CheckpointFormat::torch_dcp;
  if (name == "megatron_torch_dist") return CheckpointFormat::megatron_torch_dist;
  if (name == "safetensors") return CheckpointFormat::safetensors;
  throw fpg::Error(fpg::ExitCode::internal, "checkpoint format '" + std::string(name) + "' has no public name");
}

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

// As `--json` prints it: bytes of names that are not UTF-8 become U+FFFD rather than failing.
std::string json_text(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const char* format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::fpgather: return "fpgather";
    case CheckpointFormat::torch_dcp: return "torch_dcp";
    case CheckpointFormat::megatron_torch_dist: return "megatron_torch_dist";
    case CheckpointFormat::safetensors: return "safetensors";
  }
  return "?";
}

Checkpoint Checkpoint::open(const std::string& path) {
  return api::at_boundary([&] {
    const auto c = fpg::app::inspect::open(path);
    return Checkpoint(c->path(), public_format(c->format()));
  });
}

ValidationReport Checkpoint::validate(const ValidateOptions& options) const {
  return api::with_progress(options.progress, [&] {
    return api::at_boundary([&] {
      fpg::ckpt::ValidateOptions o;
      o.data = options.data;
      const fpg::ckpt::ValidationReport rep = fpg::app::inspect::validate(path_, o);
      ValidationReport r;
      r.readable = rep.readable;
      r.valid = rep.ok();
      r.data_checked = rep.data_checked;
      r.layout_checked = rep.layout_checked;
      r.tensors = rep.tensors;
      r.chunks = rep.chunks;
      r.files = rep.files;
      r.chunks_read = rep.chunks_read;
      r.bytes_read = rep.bytes_read;
      r.problems = public_problems(rep.problems);
      return r;
    });
  });
}

CheckpointSummary Checkpoint::inspect(const InspectOptions& options) const {
  return api::at_boundary([&] {
    fpg::ckpt::SummaryOptions o;
    o.keys = options.keys;
    o.layouts = options.layouts;
    const fpg::ckpt::CheckpointSummary s = fpg::app::inspect::inspect(path_, o);
    CheckpointSummary c;
    c.path = s.path;
    c.format = public_format(s.format);
    c.format_version = s.format_version;
    c.producer = s.producer;
    c.step = s.step;
    c.dp = s.dp;
    c.dp_is_smallest = s.dp_is_smallest;
    c.model = s.model;
    c.layout = s.layout;
    c.optimizer = s.optimizer;
    c.fp8 = s.fp8;
    c.files = s.files;
    c.bytes = s.bytes;
    c.stored_bytes = s.stored_bytes;
    for (const auto& t : s.tensors)
      c.tensors.push_back({t.name, t.kind, t.dtype, t.shape, t.numel, t.bytes, t.stored_bytes, t.chunks});
    c.json = json_text(s.document);
    return c;
  });
}

KeyStorage Checkpoint::inspect_key(const std::string& key) const {
  return api::at_boundary([&] {
    const fpg::ckpt::KeyReport k = fpg::app::inspect::inspect_key(path_, key);
    return KeyStorage{json_text(k.document), k.text};
  });
}

}  // namespace fpgather
