// What the formats hand to lib/: the seams lib/ declares and only this file fills (lib/ARCHITECTURE.md,
// "The format seam"). The formats this build reads, in the order they are probed, are the one list a
// new format joins ("Adding a format"): fpgather's own and DCP directories are told by the file that
// makes them one (index.h5 or latest, .metadata); safetensors comes last, as it takes any file.
#include "ckpt/format_registry.h"
#include "ckpt/megatron_model_writer.h"
#include "ckpt/state_store.h"
#include "core/tensor_file.h"
#include "formats/dcp/checkpoint.h"
#include "formats/dcp/megatron/model_section_writer.h"
#include "formats/fpckpt/checkpoint.h"
#include "formats/fpckpt/state_store.h"
#include "formats/safetensors/checkpoint.h"
#include "formats/safetensors/tensor_file_format.h"

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

const StateStore& state_store() {
  static const std::unique_ptr<StateStore> store = fpckpt::make_state_store();
  return *store;
}

const MegatronModelWriter& megatron_model_writer() {
  static const std::unique_ptr<MegatronModelWriter> writer = dcp::make_model_section_writer();
  return *writer;
}

}  // namespace fpg::ckpt

namespace fpg {

const TensorFileFormat& tensor_file_format() {
  static const std::unique_ptr<TensorFileFormat> format = safetensors::make_tensor_file_format();
  return *format;
}

}  // namespace fpg
