// `fpgather inspect` over any checkpoint fpgather reads (ckpt/format_registry.h): what it holds, and
// one key's storage.
#pragma once

#include <memory>
#include <string>

#include "ckpt/checkpoint_format.h"

namespace fpg::app::inspect {

// The checkpoint at `path`, opened by the format that recognises it; FormatError when none does.
std::unique_ptr<ckpt::Checkpoint> open(const std::string& path);
// The same, "LABEL: reading the index of PATH ..." shown on the terminal meanwhile when `progress`.
std::unique_ptr<ckpt::Checkpoint> open_showing(const std::string& path, const char* label, bool progress);

ckpt::CheckpointSummary inspect(const std::string& path, const ckpt::SummaryOptions& options);

// UsageError when the checkpoint holds no key `key`.
ckpt::KeyReport inspect_key(const std::string& path, const std::string& key);

}  // namespace fpg::app::inspect
