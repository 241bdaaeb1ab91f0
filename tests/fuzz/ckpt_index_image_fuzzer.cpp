// fuzz_ckpt_index_image: the bytes are an index.h5 file image, opened in memory through HDF5's core
// driver (read_index_image). A refused image must be an fpg::FormatError; an accepted one goes
// through what validate and inspect run on an index (index_checks.h). HDF5 itself is not built with
// coverage, so this target's feedback comes from fpgather's code; fuzz_ckpt_index_tables reaches
// the same checks with every mutation.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/fpckpt/index_file.h"
#include "index_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fpg::ckpt::Index index;
  try {
    index = fpg::fpckpt::read_index_image("fuzz-index.h5", data, size);
  } catch (const fpg::FormatError&) {
    return 0;
  }
  fpg::fuzz::run_index_checks(std::move(index));
  return 0;
}
