#include "formats/dcp/pickle/decode_budget.h"

#include "core/units.h"

namespace fpg::dcp {

DecodeBudget::DecodeBudget(std::string file, uint64_t input_bytes)
    : file_(std::move(file)),
      input_(input_bytes),
      limit_(input_bytes > (UINT64_MAX - kBase) / kPerInputByte ? UINT64_MAX : kBase + kPerInputByte * input_bytes) {}

bool DecodeBudget::add(uint64_t bytes) {
  const uint64_t before = used_.fetch_add(bytes, std::memory_order_relaxed);
  return bytes <= limit_ && before <= limit_ - bytes;
}

void DecodeBudget::exceeded(const std::string& where) const {
  throw FormatError(file_ + ": " + where + ": decoding takes more than the " + byte_size(limit_) +
                    " a pickle of " + byte_size(input_) + " may unfold to (64 MiB + " +
                    std::to_string(kPerInputByte) +
                    " bytes per byte of the file): values shared through its memo claim more than the file holds");
}

}  // namespace fpg::dcp
