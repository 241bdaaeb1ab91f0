#include "index_bytes.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "formats/fpckpt/index_file.h"

namespace fpg::fuzz {
namespace {

class Writer {
 public:
  template <class T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.insert(out.end(), b, b + sizeof(T));
  }
  template <class Len>
  void str(const std::string& s) {
    const size_t n = std::min<size_t>(s.size(), static_cast<Len>(-1));
    put(static_cast<Len>(n));
    out.insert(out.end(), s.begin(), s.begin() + n);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  template <class T>
  T get() {
    T v{};
    const size_t n = std::min(sizeof(T), left());
    std::memcpy(&v, p_, n);
    p_ += n;
    return v;
  }
  template <class Len>
  std::string str() {
    const size_t n = std::min<size_t>(get<Len>(), left());
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  // A record count, at most the records of `min_bytes` each that the bytes left can hold.
  size_t count(size_t min_bytes) { return std::min<size_t>(get<uint32_t>(), left() / min_bytes); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// U64 has the last of the frozen dtype codes.
DType dtype_of(uint8_t code) {
  DType t = DType::U8;
  fpckpt::dtype_from_code(code % (fpckpt::dtype_code(DType::U64) + 1), t);
  return t;
}

}  // namespace

std::vector<uint8_t> encode_index(const ckpt::Index& ix) {
  Writer w;
  w.put<uint32_t>(ix.version.major);
  w.put<uint32_t>(ix.version.minor);
  w.str<uint16_t>(ix.producer);
  w.put<uint32_t>(static_cast<uint32_t>(ix.documents.all().size()));
  for (const auto& [name, text] : ix.documents.all()) {
    w.str<uint16_t>(name);
    w.str<uint32_t>(text);
  }
  w.put<uint32_t>(static_cast<uint32_t>(ix.keys.size()));
  for (const auto& k : ix.keys) {
    w.str<uint16_t>(k.name);
    w.put<uint8_t>(fpckpt::dtype_code(k.dtype));
    w.put<uint8_t>(static_cast<uint8_t>(k.kind));
    w.put<uint8_t>(static_cast<uint8_t>(k.shape.size()));
    for (size_t d = 0; d < std::min<size_t>(k.shape.size(), 255); ++d) w.put<uint64_t>(k.shape[d]);
  }
  w.put<uint32_t>(static_cast<uint32_t>(ix.files.size()));
  for (const auto& f : ix.files) {
    w.str<uint16_t>(f.name);
    w.put<uint32_t>(f.rank);
    w.put<uint64_t>(f.size);
  }
  w.put<uint32_t>(static_cast<uint32_t>(ix.runs.size()));
  for (const auto& r : ix.runs) {
    for (uint32_t v : {r.file, r.dataset, r.key, r.chunk_elems}) w.put<uint32_t>(v);
    w.put<uint64_t>(r.lo);
    w.put<uint64_t>(r.numel);
    w.put<uint8_t>(fpckpt::dtype_code(r.dtype));
    w.put<uint8_t>(static_cast<uint8_t>(r.filters));
  }
  w.put<uint32_t>(static_cast<uint32_t>(ix.chunks.size()));
  for (const auto& c : ix.chunks) {
    w.put<uint32_t>(c.run);
    w.put<uint32_t>(c.length);
    w.put<uint64_t>(c.offset);
    w.put<uint32_t>(c.stored_bytes);
    w.put<uint32_t>(c.flags);
    w.put<uint64_t>(c.checksum_stored);
    w.put<uint64_t>(c.checksum_logical);
  }
  w.put<uint32_t>(static_cast<uint32_t>(ix.padding.size()));
  for (const auto& p : ix.padding) {
    w.put<uint32_t>(p.key);
    w.put<uint64_t>(p.lo);
    w.put<uint64_t>(p.hi);
  }
  return std::move(w.out);
}

std::optional<ckpt::Index> decode_index(const uint8_t* data, size_t size) {
  Reader r(data, size);
  ckpt::Index ix;
  ix.version.major = r.get<uint32_t>();
  ix.version.minor = r.get<uint32_t>();
  if (!ckpt::readable(ix.version)) return std::nullopt;
  ix.producer = r.str<uint16_t>();
  for (size_t n = r.count(6); n > 0; --n) {
    std::string name = r.str<uint16_t>();
    ix.documents.set_unchecked(name, r.str<uint32_t>());
  }
  for (size_t n = r.count(5); n > 0; --n) {
    ckpt::Key k;
    k.name = r.str<uint16_t>();
    k.dtype = dtype_of(r.get<uint8_t>());
    k.kind = static_cast<ckpt::KeyKind>(r.get<uint8_t>() % ckpt::kKeyKindCount);
    for (size_t d = r.get<uint8_t>(); d > 0; --d) k.shape.push_back(r.get<uint64_t>());
    ix.keys.push_back(std::move(k));
  }
  for (size_t n = r.count(14); n > 0; --n) {
    ckpt::FileEntry f;
    f.name = r.str<uint16_t>();
    f.rank = r.get<uint32_t>();
    f.size = r.get<uint64_t>();
    ix.files.push_back(std::move(f));
  }
  for (size_t n = r.count(34); n > 0; --n) {
    ckpt::Run run;
    run.file = r.get<uint32_t>();
    run.dataset = r.get<uint32_t>();
    run.key = r.get<uint32_t>();
    run.chunk_elems = r.get<uint32_t>();
    run.lo = r.get<uint64_t>();
    run.numel = r.get<uint64_t>();
    run.dtype = dtype_of(r.get<uint8_t>());
    run.filters = r.get<uint8_t>();
    if (run.lo + run.numel < run.lo) return std::nullopt;
    ix.runs.push_back(run);
  }
  for (size_t n = r.count(40); n > 0; --n) {
    ckpt::Chunk c;
    c.run = r.get<uint32_t>();
    c.length = r.get<uint32_t>();
    c.offset = r.get<uint64_t>();
    c.stored_bytes = r.get<uint32_t>();
    c.flags = r.get<uint32_t>();
    c.checksum_stored = r.get<uint64_t>();
    c.checksum_logical = r.get<uint64_t>();
    if (c.offset + c.length < c.offset) return std::nullopt;
    ix.chunks.push_back(c);
  }
  for (size_t n = r.count(20); n > 0; --n) {
    ckpt::Padding p;
    p.key = r.get<uint32_t>();
    p.lo = r.get<uint64_t>();
    p.hi = r.get<uint64_t>();
    ix.padding.push_back(p);
  }
  ix.link_chunks();
  return ix;
}

}  // namespace fpg::fuzz
