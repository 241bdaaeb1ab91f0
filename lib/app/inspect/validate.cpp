#include "app/inspect/validate.h"

#include "app/inspect/inspect.h"

namespace fpg::app::inspect {

ckpt::ValidationReport validate(const std::string& path, const ckpt::ValidateOptions& options) {
  return open_showing(path, "validate", options.progress)->validate(options);
}

}  // namespace fpg::app::inspect
