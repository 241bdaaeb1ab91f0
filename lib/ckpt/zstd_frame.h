// One Zstandard frame that records its content size: how a compressed chunk is stored, and what the
// registered HDF5 zstd filter (id 32015) reads and writes. The chunk codec (chunk_codec.h) and the
// HDF5 filter plugin (formats/fpckpt/hdf5_plugin) both go through these, so fpgather's own reader
// and third-party HDF5 readers decode the same bytes alike. Depends on libzstd only (the plugin links nothing else).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace fpg::ckpt {

// The registered HDF5 filter id of Zstandard (https://github.com/HDFGroup/hdf5_plugins), recorded in
// the checkpoint's datasets and served by the plugin.
constexpr int kZstdHdf5FilterId = 32015;

// The largest frame compressing `size` bytes can give.
size_t zstd_frame_bound(size_t size);

// Compresses `size` bytes of `src` at `level` into `dst` (capacity >= zstd_frame_bound(size)).
// Returns "" and sets *written, or what failed.
std::string zstd_compress_frame(ZSTD_CCtx_s* ctx, const void* src, size_t size, int level, void* dst,
                                size_t capacity, size_t* written);

// The content size the frame records: "" and *size, or "not a zstd frame" / "zstd frame does not
// record its size".
std::string zstd_frame_content_size(const void* frame, size_t frame_size, uint64_t* size);

// Decodes the frame into `out`, which must be exactly the `size` bytes the frame records. Returns ""
// or what is wrong (not a frame, another recorded size, corrupt data, a short decode).
std::string zstd_decompress_frame(ZSTD_DCtx_s* ctx, const void* frame, size_t frame_size, void* out, size_t size);

}  // namespace fpg::ckpt
