// A hint for large buffers that are filled once, front to back (a decoded pickle's arrays, the
// .metadata image): back them with transparent huge pages where the kernel allows it for madvise,
// sparing a page fault per 4 KiB.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>

namespace fpg::dcp {

inline void prefer_huge_pages(const void* data, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t lo = (begin + kHuge - 1) & ~(kHuge - 1), hi = (begin + bytes) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

}  // namespace fpg::dcp
