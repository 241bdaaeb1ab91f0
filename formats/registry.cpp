// The formats this build reads, in the order they are probed: the one list a new format joins
// (lib/ARCHITECTURE.md, "Adding a format"). fpgather's own and DCP directories are told by the file
// that makes them one (index.h5 or latest, .metadata); safetensors comes last, as it takes any file.
#include "ckpt/format_registry.h"
#include "ckpt/megatron_model_writer.h"
#include "formats/dcp/checkpoint.h"
#include "formats/dcp/megatron/model_section_writer.h"
#include "formats/fpckpt/checkpoint.h"
#include "formats/safetensors/checkpoint.h"

namespace fpg::ckpt {

const FormatRegistry& builtin_formats() {
  static const FormatRegistry registry = [] {
    FormatRegistry r;
    r.add(fpckpt::make_format());
    r.add(dcp::make_format());
    r.add(safetensors::make_format());
    return r;
  }();
  return registry;
}

std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path) { return builtin_formats().open(path); }

const MegatronModelWriter& megatron_model_writer() {
  static const std::unique_ptr<MegatronModelWriter> writer = dcp::make_model_section_writer();
  return *writer;
}

}  // namespace fpg::ckpt
