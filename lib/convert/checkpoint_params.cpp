#include "convert/checkpoint_params.h"

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"
#include "formats/fpckpt/param_source.h"
#include "formats/fpckpt/reader.h"

namespace fpg::convert {
namespace {

struct OpenedDcp : OpenedParams {
  explicit OpenedDcp(const std::string& path) : reader(path), source(reader) {}
  const ckpt::ParamSource& params() const override { return source; }
  dcp::Reader reader;
  dcp::DcpParams source;
};

struct OpenedFpckpt : OpenedParams {
  explicit OpenedFpckpt(const std::string& path) : reader(path), source(reader) {}
  const ckpt::ParamSource& params() const override { return source; }
  fpckpt::CheckpointReader reader;
  fpckpt::CheckpointParams source;
};

}  // namespace

bool is_dcp_checkpoint(const std::string& path) { return dcp::is_dcp_directory(path); }

std::unique_ptr<OpenedParams> open_params(const std::string& path) {
  if (is_dcp_checkpoint(path)) return std::make_unique<OpenedDcp>(path);
  return std::make_unique<OpenedFpckpt>(path);
}

}  // namespace fpg::convert
