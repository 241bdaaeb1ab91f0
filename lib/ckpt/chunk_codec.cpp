#include "ckpt/chunk_codec.h"

#include <zstd.h>

#include <cstring>

#include "ckpt/index.h"
#include "ckpt/zstd_frame.h"
#include "core/printable.h"
#include "core/error.h"

namespace fpg::ckpt {
namespace {

// One zstd context per thread: creating one per chunk costs more than compressing a small chunk.
struct ZstdContexts {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~ZstdContexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};
ZstdContexts& zstd_contexts() {
  thread_local ZstdContexts ctx;
  return ctx;
}

}  // namespace

Compression parse_compression(std::string_view text, const std::string& field) {
  Compression c;
  std::string_view t = text;
  const std::string_view suffix = "+shuffle";
  if (t.size() > suffix.size() && t.substr(t.size() - suffix.size()) == suffix) {
    c.shuffle = true;
    t = t.substr(0, t.size() - suffix.size());
  }
  auto bad = [&] {
    return UsageError(Message(Field{field}, " ", quoted_name(std::string(text)),
                              ": expected none, zstd, zstd:LEVEL (1..22), optionally +shuffle"));
  };
  if (t == "none") {
    if (c.shuffle) throw bad();
    c.zstd = false;
    return c;
  }
  if (t == "zstd") return c;
  if (t.substr(0, 5) != "zstd:" || t.size() == 5) throw bad();
  int level = 0;
  size_t i = 5;
  bool neg = false;
  if (t[i] == '-') neg = true, ++i;
  if (i == t.size()) throw bad();
  for (; i < t.size(); ++i) {
    if (t[i] < '0' || t[i] > '9' || level > 100) throw bad();
    level = level * 10 + (t[i] - '0');
  }
  if (neg) level = -level;
  if (level == 0 || level > 22 || level < -7) throw bad();
  c.level = level;
  return c;
}

std::string to_string(const Compression& c) {
  if (!c.zstd) return "none";
  return "zstd:" + std::to_string(c.level) + (c.shuffle ? "+shuffle" : "");
}

void shuffle_bytes(const uint8_t* in, uint8_t* out, size_t size, size_t elem) {
  const size_t n = size / elem;
  for (size_t j = 0; j < elem; ++j) {
    uint8_t* o = out + j * n;
    const uint8_t* s = in + j;
    for (size_t i = 0; i < n; ++i) o[i] = s[i * elem];
  }
  std::memcpy(out + n * elem, in + n * elem, size - n * elem);
}

void unshuffle_bytes(const uint8_t* in, uint8_t* out, size_t size, size_t elem) {
  const size_t n = size / elem;
  for (size_t j = 0; j < elem; ++j) {
    const uint8_t* s = in + j * n;
    uint8_t* o = out + j;
    for (size_t i = 0; i < n; ++i) o[i * elem] = s[i];
  }
  std::memcpy(out + n * elem, in + n * elem, size - n * elem);
}

EncodedChunk encode_chunk(const void* logical, uint64_t length, uint64_t chunk_elems, size_t elem,
                          const Compression& c, CodecScratch& s) {
  const size_t full = chunk_elems * elem;
  const size_t have = length * elem;
  const uint8_t* raw = static_cast<const uint8_t*>(logical);
  if (have < full) {  // the edge chunk: HDF5 stores it whole, the rest zeros
    s.a.resize(full);
    std::memcpy(s.a.data(), logical, have);
    std::memset(s.a.data() + have, 0, full - have);
    raw = s.a.data();
  }
  if (!c.zstd || elem == 0) return {raw, full, 0};
  const uint8_t* src = raw;
  if (c.shuffle && elem > 1) {
    std::vector<uint8_t>& dst = (raw == s.a.data()) ? s.b : s.a;
    dst.resize(full);
    shuffle_bytes(raw, dst.data(), full, elem);
    src = dst.data();
  }
  // The frame goes to a buffer that is neither the raw bytes (kept for the store-raw fallback) nor the source.
  std::vector<uint8_t>* out = &s.a;
  for (std::vector<uint8_t>* v : {&s.a, &s.b, &s.c})
    if (v->data() != raw && v->data() != src) { out = v; break; }
  out->resize(zstd_frame_bound(full));
  size_t z = 0;
  const std::string err = zstd_compress_frame(zstd_contexts().c, src, full, c.level, out->data(), out->size(), &z);
  if (!err.empty()) throw InternalError(err);
  // Not worth decoding for less than 5%: store raw (unshuffled), the filter mask will skip both filters.
  if (z * 105 > full * 100) return {raw, full, 0};
  return {out->data(), z, kFilterZstd | ((c.shuffle && elem > 1) ? kFilterShuffle : 0u)};
}

std::string decode_chunk(const uint8_t* stored, size_t stored_size, uint32_t flags, uint64_t length,
                         uint64_t chunk_elems, size_t elem, void* out, CodecScratch& s) {
  const size_t full = chunk_elems * elem;
  const size_t want = length * elem;
  const uint8_t* raw = stored;
  if (flags & kFilterZstd) {
    s.a.resize(full);
    const std::string err = zstd_decompress_frame(zstd_contexts().d, stored, stored_size, s.a.data(), full);
    if (!err.empty()) return err;
    raw = s.a.data();
  } else if (stored_size != full) {
    return "stored chunk has " + std::to_string(stored_size) + " bytes, expected " + std::to_string(full);
  }
  if (flags & kFilterShuffle) {
    s.b.resize(full);
    unshuffle_bytes(raw, s.b.data(), full, elem);
    raw = s.b.data();
  }
  std::memcpy(out, raw, want);
  return "";
}

}  // namespace fpg::ckpt
