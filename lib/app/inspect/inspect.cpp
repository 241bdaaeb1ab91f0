#include "app/inspect/inspect.h"

#include "ckpt/format_registry.h"

namespace fpg::app::inspect {

std::unique_ptr<ckpt::Checkpoint> open(const std::string& path) { return ckpt::open_checkpoint(path); }

ckpt::CheckpointSummary inspect(const std::string& path, const ckpt::SummaryOptions& options) {
  return open(path)->summary(options);
}

ckpt::KeyReport inspect_key(const std::string& path, const std::string& key) { return open(path)->key(key); }

}  // namespace fpg::app::inspect
