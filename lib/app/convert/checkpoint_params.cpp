#include "app/convert/checkpoint_params.h"

#include "formats/dcp/dcp_params.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/validate.h"
#include "formats/fpckpt/param_source.h"
#include "formats/fpckpt/reader.h"
#include "formats/fpckpt/validate.h"

namespace fpg::app::convert {
namespace {

// The reader, once it passes the metadata and storage checks (when asked for).
const dcp::Reader& checked(const dcp::Reader& r, const std::string& refusing, bool validate) {
  if (validate) dcp::require_valid(r, refusing);
  return r;
}

struct OpenedDcp : OpenedParams {
  OpenedDcp(const std::string& path, const std::string& refusing, bool validate)
      : reader(path), source(checked(reader, refusing, validate)) {}
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

}  // namespace fpg::app::convert
