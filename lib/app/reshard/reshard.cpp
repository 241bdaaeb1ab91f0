#include "app/reshard/reshard.h"

#include "ckpt/format_registry.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/log.h"

namespace fpg::app::reshard {

ckpt::ReshardReport reshard(const std::string& source, const std::string& target, const ckpt::ReshardTarget& options) {
  const bool existed = fs::exists(target);
  spdlog::info("resharding {} into {}", source, target);
  return run_interruptible([&] { return ckpt::open_checkpoint(source)->reshard(target, options); },
                           [&] { return nothing_written(target, existed); });
}

}  // namespace fpg::app::reshard
