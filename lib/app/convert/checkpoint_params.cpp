#include "app/convert/checkpoint_params.h"

#include "ckpt/format_registry.h"

namespace fpg::app::convert {

std::optional<ckpt::Contents> source_contents(const std::string& path) {
  if (const ckpt::Format* f = ckpt::builtin_formats().probe(path)) return f->contents();
  return std::nullopt;
}

std::unique_ptr<OpenedParams> open_params(const std::string& path, const std::string& refusing, bool validate) {
  ckpt::ParamsOptions o;
  o.refusing = refusing;
  o.validate = validate;
  return ckpt::open_checkpoint(path)->params(o);
}

}  // namespace fpg::app::convert
