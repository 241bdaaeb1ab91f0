// fuzz_ckpt_index_tables: the bytes are an index's tables and documents in the encoding of
// index_bytes.h (seeds: the testdata checkpoints' indexes, encoded by fpgather_fuzz_index_seeds),
// decoded into an index read_index could have returned and run through what validate and inspect
// run on it (index_checks.h).
#include <cstddef>
#include <cstdint>

#include "index_bytes.h"
#include "index_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto index = fpg::fuzz::decode_index(data, size);
  if (index) fpg::fuzz::run_index_checks(std::move(*index));
  return 0;
}
