#include "app/reshard/reshard.h"

#include "ckpt/format_registry.h"

namespace fpg::app::reshard {

ckpt::ReshardReport reshard(const std::string& source, const std::string& target, const ckpt::ReshardTarget& options) {
  return ckpt::open_checkpoint(source)->reshard(target, options);
}

}  // namespace fpg::app::reshard
