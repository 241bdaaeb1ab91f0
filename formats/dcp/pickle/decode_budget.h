// The memory that decoding one pickle may take, derived from the pickle's size: a hostile pickle is
// small and shares values through its memo (one list of chunks named by every key, one long tuple
// named by every chunk), and what unfolds from it must stop at a bound the file's size sets, not at
// the machine's memory.
//
// One budget per pickle, limit = kBase + kPerInputByte × its size. Charged with the bytes of what is
// built from it, as it is built: the decoder's own arrays (PickleMachine: values, container items,
// text, and every copy a REDUCE makes, such as set(list) or bytearray(bytes)), and everything a
// consumer materializes from the document (PickleDocument::to_value, the .metadata decoder: each
// chunk, dimension, name and path element, counted each time a shared value is unfolded). Past the
// limit, a FormatError names the file and where the decoding stood.
//
// Charging is a few adds: a Meter keeps its own count and publishes it to the shared total in steps
// of kStep bytes (so two threads may each overshoot by one step).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace fpg::dcp {

class DecodeBudget {
 public:
  static constexpr uint64_t kBase = uint64_t{64} << 20;
  static constexpr uint64_t kPerInputByte = 16;
  static constexpr uint64_t kStep = uint64_t{256} << 10;

  DecodeBudget(std::string file, uint64_t input_bytes);
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  const std::string& file() const { return file_; }
  uint64_t input_bytes() const { return input_; }
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // Adds `bytes` to the total: false when that takes it past the limit.
  bool add(uint64_t bytes);
  // The refusal: a FormatError naming the file and `where` the decoding stood.
  [[noreturn]] void exceeded(const std::string& where) const;

  // One thread's charges, published in steps. `where` is called only for the message of a refusal.
  class Meter {
   public:
    explicit Meter(DecodeBudget& budget) : budget_(budget) {}
    Meter(const Meter&) = delete;
    Meter& operator=(const Meter&) = delete;
    ~Meter() { budget_.used_.fetch_add(pending_, std::memory_order_relaxed); }
    template <class Where>
    void charge(uint64_t bytes, Where&& where) {
      pending_ += bytes;
      if (pending_ >= kStep || bytes >= budget_.limit_) {
        const uint64_t n = pending_;
        pending_ = 0;
        if (!budget_.add(n)) budget_.exceeded(where());
      }
    }

   private:
    DecodeBudget& budget_;
    uint64_t pending_ = 0;
  };

 private:
  std::string file_;
  uint64_t input_ = 0;
  uint64_t limit_ = 0;
  std::atomic<uint64_t> used_{0};
};

// What an allocation of `n` bytes takes from the heap: glibc's malloc rounds a request plus its
// 8-byte header up to 16 bytes, 32 at least. Charging the request alone would let a million
// one-element vectors take four times what they were charged.
inline uint64_t heap_bytes(uint64_t n) { return n == 0 ? 0 : n < 24 ? 32 : (n + 8 + 15) & ~uint64_t{15}; }
// The heap a std::string of `n` characters takes (none within its inline buffer).
inline uint64_t string_heap_bytes(uint64_t n) { return n < 16 ? 0 : heap_bytes(n + 1); }

}  // namespace fpg::dcp
