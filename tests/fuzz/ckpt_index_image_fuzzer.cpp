// fuzz_ckpt_index_image: the bytes are an index.h5 file image, opened in memory through HDF5's core
// driver (read_index_image). A refused image must be an fpg::FormatError; an accepted one goes
// through what validate and inspect run on an index (index_checks.h). HDF5 itself is not built with
// coverage, so this target's feedback comes from fpgather's code; fuzz_ckpt_index_tables reaches
// the same checks with every mutation.
//
// Each input is opened under a name of its own: HDF5 matches an image to a file it holds open by
// name, and its error paths can leave a refused image's file open, so that under one shared name an
// input would be read against the remains of an earlier one (a finding that no single input
// reproduces).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "formats/fpckpt/index_file.h"
#include "index_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static unsigned long long inputs = 0;
  const std::string name = "fuzz-index-" + std::to_string(inputs++) + ".h5";
  fpg::ckpt::Index index;
  try {
    index = fpg::fpckpt::read_index_image(name, data, size);
  } catch (const fpg::FormatError&) {
    return 0;
  }
  fpg::fuzz::run_index_checks(std::move(index));
  return 0;
}
