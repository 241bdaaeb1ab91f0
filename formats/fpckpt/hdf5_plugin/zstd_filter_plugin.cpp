// The HDF5 filter plugin for Zstandard (registered filter id 32015, as hdf5plugin and the HDF Group's
// hdf5_plugins register it), so that h5dump, h5py and other HDF5 readers decode the chunks of
// fpgather checkpoints when HDF5_PLUGIN_PATH names the directory holding it. Frames are made and
// read by ckpt/zstd_frame.h, as fpgather's own chunk codec does.
//
// Buffers are malloc'd and freed with free(): the plugin links no HDF5 library, since the reader
// that loads it may carry its own copy (h5py's wheels do) whose symbols are not global, and HDF5's
// chunk buffers are plain malloc memory in every non-debug build.
#include <H5PLextern.h>
#include <zstd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "ckpt/zstd_frame.h"

namespace {

// An HDF5 chunk holds less than 4 GiB, so a frame claiming more is not one of a chunk.
constexpr uint64_t kMaxChunkBytes = 0xFFFFFFFFull;

// Replaces *buf by `out` (holding `size` valid bytes of `capacity`) as the filter contract asks.
size_t hand_over(void* out, size_t size, size_t capacity, size_t* buf_size, void** buf) {
  std::free(*buf);
  *buf = out;
  *buf_size = capacity;
  return size;
}

size_t decompress(size_t nbytes, size_t* buf_size, void** buf) {
  uint64_t size = 0;
  if (!fpg::ckpt::zstd_frame_content_size(*buf, nbytes, &size).empty() || size > kMaxChunkBytes) return 0;
  void* out = std::malloc(size ? size : 1);
  if (!out) return 0;
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  const bool ok = ctx && fpg::ckpt::zstd_decompress_frame(ctx, *buf, nbytes, out, size).empty();
  ZSTD_freeDCtx(ctx);
  if (!ok) {
    std::free(out);
    return 0;
  }
  return hand_over(out, size, size ? size : 1, buf_size, buf);
}

size_t compress(int level, size_t nbytes, size_t* buf_size, void** buf) {
  const size_t capacity = fpg::ckpt::zstd_frame_bound(nbytes);
  void* out = std::malloc(capacity);
  if (!out) return 0;
  ZSTD_CCtx* ctx = ZSTD_createCCtx();
  size_t written = 0;
  const bool ok = ctx && fpg::ckpt::zstd_compress_frame(ctx, *buf, nbytes, level, out, capacity, &written).empty();
  ZSTD_freeCCtx(ctx);
  if (!ok) {
    std::free(out);
    return 0;
  }
  return hand_over(out, written, capacity, buf_size, buf);
}

// H5Z_func_t: 0 on failure, else the bytes now valid in *buf. cd_values[0] is the compression level
// (fpgather writes its --compress level there; negative levels arrive two's-complement).
size_t zstd_filter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[], size_t nbytes, size_t* buf_size,
                   void** buf) {
  if (flags & H5Z_FLAG_REVERSE) return decompress(nbytes, buf_size, buf);
  const int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : ZSTD_CLEVEL_DEFAULT;
  return compress(level, nbytes, buf_size, buf);
}

const H5Z_class2_t kZstdFilter = {
    H5Z_CLASS_T_VERS, fpg::ckpt::kZstdHdf5FilterId, 1, 1, "Zstandard compression (fpgather)", nullptr, nullptr, zstd_filter,
};

}  // namespace

extern "C" {
H5PLUGIN_DLL H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_FILTER; }
H5PLUGIN_DLL const void* H5PLget_plugin_info(void) { return &kZstdFilter; }
}
