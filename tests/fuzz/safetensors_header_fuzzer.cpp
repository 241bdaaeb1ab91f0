// fuzz_safetensors_header: the bytes are a whole .safetensors file. A Reader either refuses it with
// fpg::FormatError or accepts it; then every tensor's byte range must lie inside the input (ASan
// checks the first and last byte of each) and the lookups must agree with the tensor list.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using fpg::safetensors::Reader;
  try {
    const Reader r = Reader::from_buffer("fuzz.safetensors", data, size);
    volatile uint8_t sink = 0;
    uint64_t covered = 0;
    for (const auto& t : r.tensors()) {
      if (r.find(t.name) != &t) std::abort();  // names are unique and found
      const auto bytes = r.bytes(t);
      if (bytes.size > 0) sink = sink ^ bytes.data[0] ^ bytes.data[bytes.size - 1];
      covered += bytes.size;
      fpg::safetensors::quote_name(t.name);
    }
    if (covered != r.data_size() || r.data_offset() + r.data_size() != size) std::abort();  // contiguous, no trailing bytes
    for (const auto& [k, v] : r.metadata()) fpg::safetensors::quote_name(k + v);
  } catch (const fpg::FormatError&) {
  }
  return 0;
}
