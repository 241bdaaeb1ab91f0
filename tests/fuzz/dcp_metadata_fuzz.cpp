// libFuzzer target: a DCP .metadata image through the restricted unpickler and the metadata decoder
// (and, when it decodes, validation of its chunks). Any exception other than fpg::FormatError, a
// crash, a hang or unbounded memory is a bug. Seeds: testdata/dcp/*/.metadata, testdata/dcp/broken.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/dcp/metadata/metadata.h"
#include "formats/dcp/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fpg::dcp::PickleLimits limits;
  limits.max_nodes = 1u << 20;
  limits.max_value_nodes = 1u << 16;
  try {
    const fpg::dcp::Metadata m = fpg::dcp::parse_metadata("fuzz/.metadata", data, size, limits);
    fpg::dcp::check_metadata(m);
  } catch (const fpg::FormatError&) {
  }
  return 0;
}
