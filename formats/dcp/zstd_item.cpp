#include "formats/dcp/zstd_item.h"

#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "formats/safetensors/format.h"

namespace fpg::dcp {
namespace {

constexpr size_t kInBlock = size_t{128} << 10;   // compressed bytes read at a time
constexpr size_t kFirstBlock = size_t{64} << 10;  // decoded blocks: from this, doubling
constexpr size_t kMaxBlock = size_t{4} << 20;     // up to this
constexpr uint32_t kZstdMagic = 0xFD2FB528u;
constexpr uint32_t kSkippableMagic = 0x184D2A50u;  // the low 4 bits are free
constexpr int kWindowLogLimit = 27;               // zstd's default streaming limit (ZSTD_WINDOWLOG_LIMIT_DEFAULT)

// The window the decoder may allocate, as a log2: what the item's bound needs, and at least 8 MiB,
// which any frame torch's writers produce (zstandard's and pyzstd's default level 3 uses 2 MiB; level
// 19 8 MiB) fits in; zstd's own streaming limit (128 MiB) above that.
int window_log_max(uint64_t most) {
  int log = 23;
  while (log < kWindowLogLimit && (uint64_t{1} << log) < most) ++log;
  return log;
}

struct DCtxFree {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// The frames of a compressed range, decoded in order as output is asked of it.
class Decoder {
 public:
  Decoder(const ByteSource& src, uint64_t most, const std::string& what, bool first_frame_only = false)
      : first_frame_only_(first_frame_only), src_(src), what_(what), window_log_(window_log_max(most)), ctx_(ZSTD_createDCtx()), in_buf_(static_cast<size_t>(std::min<uint64_t>(kInBlock, src.size()))) {
    if (!ctx_) throw std::bad_alloc();
    if (src.size() == 0) throw FormatError(what_ + ": the item is empty, not a zstd stream");
    uint8_t head[4] = {};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof head, src.size()));
    src.read(0, head, n);
    uint32_t magic = 0;
    for (size_t i = n; i-- > 0;) magic = magic << 8 | head[i];
    if (n < 4 || (magic != kZstdMagic && (magic & 0xFFFFFFF0u) != kSkippableMagic)) {
      std::string hex;
      for (size_t i = 0; i < n; ++i) {
        char b[4];
        std::snprintf(b, sizeof b, "%s%02x", i ? " " : "", head[i]);
        hex += b;
      }
      throw FormatError(what_ + ": the item is not a zstd stream (it starts with bytes " + hex +
                        "; a zstd frame starts with 28 b5 2f fd)");
    }
    const size_t r = ZSTD_DCtx_setParameter(ctx_.get(), ZSTD_d_windowLogMax, window_log_);
    if (ZSTD_isError(r)) throw InternalError(std::string("zstd: ") + ZSTD_getErrorName(r));
  }

  // Decodes up to `cap` bytes into `dst`; fewer only at the end of the stream (done()).
  size_t produce(uint8_t* dst, size_t cap) {
    size_t produced = 0;
    while (produced < cap) {
      if (in_.pos == in_.size && read_ < src_.size()) refill();
      const bool no_input = in_.pos == in_.size;
      if (no_input && !frame_open_) {
        done_ = true;
        break;
      }
      ZSTD_outBuffer out{dst + produced, cap - produced, 0};
      const size_t ret = ZSTD_decompressStream(ctx_.get(), &out, &in_);
      if (ZSTD_isError(ret) && ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge)
        throw FormatError(what_ + ": a zstd frame declares a window larger than the 2^" + std::to_string(window_log_) +
                          " bytes this item can need; refusing to allocate it");
      if (ZSTD_isError(ret))
        throw FormatError(what_ + ": corrupt zstd stream at about compressed byte " + std::to_string(read_) + " of " +
                          std::to_string(src_.size()) + " (" + ZSTD_getErrorName(ret) + ")");
      produced += out.pos;
      frame_open_ = ret != 0;
      if (first_frame_only_ && !frame_open_) {
        done_ = true;
        break;
      }
      if (no_input && out.pos == 0 && frame_open_)
        throw FormatError(what_ + ": the zstd stream is truncated: its " + std::to_string(src_.size()) +
                          " bytes end inside a frame, after " + std::to_string(decoded_ + produced) + " decoded bytes");
    }
    decoded_ += produced;
    return produced;
  }
  bool done() const { return done_; }

 private:
  void refill() {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(in_buf_.size(), src_.size() - read_));
    src_.read(read_, in_buf_.data(), n);
    read_ += n;
    in_ = {in_buf_.data(), n, 0};
  }

  bool first_frame_only_;
  const ByteSource& src_;
  const std::string& what_;
  int window_log_;
  std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx_;
  std::vector<uint8_t> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  uint64_t read_ = 0;     // compressed bytes read
  uint64_t decoded_ = 0;  // bytes produced
  bool frame_open_ = false;
  bool done_ = false;
};

}  // namespace

bool is_zstd_transform(const std::vector<std::string>& descriptors, const std::string& where) {
  if (descriptors.empty()) return false;
  std::string list;
  for (const std::string& d : descriptors) list += (list.empty() ? "" : ", ") + safetensors::quote_name(d);
  if (descriptors.size() > 1)
    throw FormatError(where + " is stored through a chain of stream transforms (" + list +
                      "); only torch's ZStandard extension alone (stream.zstd/1) is read");
  const std::string& d = descriptors.front();
  // As torch's ExtensionRegistry parses it: NAME[/VERSION], ZStandard taking any 1.x.
  const size_t slash = d.find('/');
  const std::string name = d.substr(0, slash);
  const std::string version = slash == std::string::npos ? "" : d.substr(slash + 1);
  if (name != kZstdTransform)
    throw FormatError(where + " is stored through the stream transform " + list +
                      ", which is not supported (only torch's ZStandard extension, stream.zstd/1, is read)");
  if (version.substr(0, version.find('.')) != "1")
    throw FormatError(where + " is stored through " + list + ": ZStandard extension version " +
                      safetensors::quote_name(version) + " is not supported (version 1 is read)");
  return true;
}

void DecodedItem::read(uint64_t offset, void* dst, uint64_t len) const {
  if (offset > size_ || len > size_ - offset)
    throw InternalError(name_ + ": read of [" + std::to_string(offset) + ", +" + std::to_string(len) +
                        ") outside the decoded item");
  auto* out = static_cast<uint8_t*>(dst);
  // Blocks double from kFirstBlock up to kMaxBlock: find the one holding `offset` by walking them.
  uint64_t start = 0;
  size_t b = 0;
  size_t block = kFirstBlock;
  while (len > 0) {
    if (offset < start + block) {
      const uint64_t at = offset - start, k = std::min<uint64_t>(len, block - at);
      std::memcpy(out, blocks_[b].get() + at, static_cast<size_t>(k));
      out += k;
      offset += k;
      len -= k;
    }
    if (len == 0) break;
    start += block;
    ++b;
    block = std::min(block * 2, kMaxBlock);
  }
}

std::shared_ptr<const DecodedItem> decode_zstd_item(const ByteSource& compressed, uint64_t most,
                                                    const std::string& what) {
  Decoder dec(compressed, most, what);
  auto item = std::make_shared<DecodedItem>();
  size_t block = kFirstBlock;
  while (!dec.done() && item->size_ < most) {
    // A block is made before the frames have produced its bytes, so it is never larger than what
    // the bound still allows.
    const size_t n = static_cast<size_t>(std::min<uint64_t>(block, most - item->size_));
    item->blocks_.emplace_back(new uint8_t[n]);
    item->size_ += dec.produce(item->blocks_.back().get(), n);
    if (n < block) break;  // the bound is reached inside this block
    block = std::min(block * 2, kMaxBlock);
  }
  if (!dec.done()) {
    uint8_t extra = 0;
    if (dec.produce(&extra, 1) > 0)
      throw FormatError(what + ": the zstd stream expands past the " + std::to_string(most) +
                        " bytes this item can hold; refusing to decode more");
  }
  item->name_ = what + " (zstd, " + std::to_string(item->size_) + " bytes decoded)";
  return item;
}

bool zstd_first_frame_is_empty(const ByteSource& compressed) {
  try {
    Decoder dec(compressed, 1, "", true);
    uint8_t b = 0;
    return dec.produce(&b, 1) == 0 && dec.done();
  } catch (const FormatError&) {
    return false;
  }
}

std::vector<uint8_t> decode_zstd_prefix(const ByteSource& compressed, size_t n, const std::string& what) {
  Decoder dec(compressed, n, what);
  std::vector<uint8_t> out(n);
  out.resize(dec.produce(out.data(), n));
  return out;
}

}  // namespace fpg::dcp
