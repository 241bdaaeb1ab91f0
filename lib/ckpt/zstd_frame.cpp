#include "ckpt/zstd_frame.h"

#include <zstd.h>

namespace fpg::ckpt {

size_t zstd_frame_bound(size_t size) { return ZSTD_compressBound(size); }

std::string zstd_compress_frame(ZSTD_CCtx* ctx, const void* src, size_t size, int level, void* dst,
                                size_t capacity, size_t* written) {
  const size_t z = ZSTD_compressCCtx(ctx, dst, capacity, src, size, level);
  if (ZSTD_isError(z)) return std::string("zstd compression failed: ") + ZSTD_getErrorName(z);
  *written = z;
  return "";
}

std::string zstd_frame_content_size(const void* frame, size_t frame_size, uint64_t* size) {
  const unsigned long long content = ZSTD_getFrameContentSize(frame, frame_size);
  if (content == ZSTD_CONTENTSIZE_ERROR) return "not a zstd frame";
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) return "zstd frame does not record its size";
  *size = content;
  return "";
}

std::string zstd_decompress_frame(ZSTD_DCtx* ctx, const void* frame, size_t frame_size, void* out, size_t size) {
  const unsigned long long content = ZSTD_getFrameContentSize(frame, frame_size);
  if (content == ZSTD_CONTENTSIZE_ERROR) return "not a zstd frame";
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != size)
    return "zstd frame holds " + std::to_string(content) + " bytes, expected " + std::to_string(size);
  const size_t z = ZSTD_decompressDCtx(ctx, out, size, frame, frame_size);
  if (ZSTD_isError(z)) return std::string("zstd: ") + ZSTD_getErrorName(z);
  if (z != size) return "zstd frame decodes to " + std::to_string(z) + " bytes, expected " + std::to_string(size);
  return "";
}

}  // namespace fpg::ckpt
