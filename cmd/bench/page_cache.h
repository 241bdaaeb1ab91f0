// Cold reads for the benchmarks of `fpgather bench`: a file's pages dropped from the page cache, so
// that the next read of it comes from the disk (no root needed).
#pragma once

#include <string>

namespace fpg::bench {

// Drops the pages of a file, or of every file under a directory, from the page cache (dirty pages
// are written first). A path that cannot be opened is left alone.
void evict_path(const std::string& path);

}  // namespace fpg::bench
