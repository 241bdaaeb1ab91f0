#include "convert/checkpoint_params.h"

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/validate.h"
#include "formats/fpckpt/param_source.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"

namespace fpg::convert {
namespace {

// Refuses a DCP checkpoint whose metadata or storage checks fail, listing the problems.
const dcp::Reader& require_valid_dcp(const dcp::Reader& r, const std::string& refusing) {
  const dcp::ValidationReport rep = dcp::validate(r);
  if (rep.ok()) return r;
  std::string msg = r.dir() + ": not a valid checkpoint, refusing to " + refusing + " (fpgather validate lists every problem):";
  for (size_t i = 0; i < rep.problems.size() && i < 20; ++i) msg += "\n  " + ckpt::to_string(rep.problems[i]);
  if (rep.problems.size() > 20) msg += "\n  … " + std::to_string(rep.problems.size() - 20) + " more";
  throw fpckpt::InvalidCheckpoint(msg);
}

struct OpenedDcp : OpenedParams {
  OpenedDcp(const std::string& path, const std::string& refusing, bool validate)
      : reader(path), source(validate ? require_valid_dcp(reader, refusing) : reader) {}
  const ckpt::ParamSource& params() const override { return source; }
  dcp::Reader reader;
  dcp::DcpParams source;
};

struct OpenedFpckpt : OpenedParams {
  OpenedFpckpt(const std::string& path, const std::string& refusing, bool validate)
      : reader(fpckpt::open_valid(path, refusing, validate)), source(*reader) {}
  const ckpt::ParamSource& params() const override { return source; }
  std::unique_ptr<fpckpt::CheckpointReader> reader;
  fpckpt::CheckpointParams source;
};

}  // namespace

bool is_dcp_checkpoint(const std::string& path) { return dcp::is_dcp_directory(path); }

std::unique_ptr<OpenedParams> open_params(const std::string& path, const std::string& refusing, bool validate) {
  if (is_dcp_checkpoint(path)) return std::make_unique<OpenedDcp>(path, refusing, validate);
  return std::make_unique<OpenedFpckpt>(path, refusing, validate);
}

}  // namespace fpg::convert
