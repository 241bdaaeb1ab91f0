// fpgather_fuzz_index_seeds OUT_DIR INDEX.h5...: writes each index, read with read_index and encoded
// as fuzz_ckpt_index_tables reads it (index_bytes.h), to OUT_DIR/<n>.bin. Indexes read_index
// refuses are skipped with a message (the broken fixtures include a newer version).
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"
#include "formats/fpckpt/index_file.h"
#include "index_bytes.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT_DIR INDEX.h5...\n", argv[0]);
    return 2;
  }
  int written = 0;
  for (int i = 2; i < argc; ++i) {
    try {
      const auto bytes = fpg::fuzz::encode_index(fpg::fpckpt::read_index(argv[i]));
      const std::string out = std::string(argv[1]) + "/" + std::to_string(i - 1) + ".bin";
      std::ofstream f(out, std::ios::binary);
      if (!f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()))) {
        std::fprintf(stderr, "cannot write %s\n", out.c_str());
        return 1;
      }
      ++written;
    } catch (const fpg::Error& e) {
      std::fprintf(stderr, "skipped %s: %s\n", argv[i], e.what());
    }
  }
  std::printf("%d seeds written to %s\n", written, argv[1]);
  return written > 0 ? 0 : 1;
}
