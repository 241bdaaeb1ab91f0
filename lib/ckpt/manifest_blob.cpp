#include "ckpt/manifest_blob.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace fpg::ckpt {
namespace {

struct Out {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "plain values only");
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

struct In {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  void need(size_t n) const {
    if (n > b.size() - at) throw InternalError("rank manifest blob is truncated at byte " + std::to_string(at));
  }
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(b.data() + at), n);
    at += n;
    return s;
  }
  size_t count(size_t elem_min) {
    const auto n = get<uint64_t>();
    if (n > (b.size() - at) / elem_min) throw InternalError("rank manifest blob: count " + std::to_string(n) + " too large at byte " + std::to_string(at) + " of " + std::to_string(b.size()));
    return static_cast<size_t>(n);
  }
};

}  // namespace

std::vector<uint8_t> manifest_to_bytes(const RankManifest& m) {
  Out o;
  o.put<uint32_t>(m.rank);
  o.str(m.file.name);
  o.put<uint32_t>(m.file.rank);
  o.put<uint64_t>(m.file.size);
  o.put<uint64_t>(m.keys.size());
  for (const auto& k : m.keys) {
    o.str(k.name);
    o.put<uint8_t>(static_cast<uint8_t>(k.dtype));
    o.put<uint8_t>(static_cast<uint8_t>(k.kind));
    o.put<uint64_t>(k.shape.size());
    for (uint64_t d : k.shape) o.put<uint64_t>(d);
  }
  o.put<uint64_t>(m.runs.size());
  for (const auto& r : m.runs) {
    o.put(r.file), o.put(r.dataset), o.put(r.key), o.put(r.chunk_elems), o.put(r.lo), o.put(r.numel);
    o.put<uint8_t>(static_cast<uint8_t>(r.dtype));
    o.put(r.filters);
  }
  o.put<uint64_t>(m.chunks.size());
  for (const auto& c : m.chunks) {
    o.put(c.run), o.put(c.key), o.put(c.file), o.put(c.length), o.put(c.offset), o.put(c.stored_bytes);
    o.put(c.flags), o.put(c.checksum_stored), o.put(c.checksum_logical);
  }
  o.put<uint64_t>(m.padding.size());
  for (const auto& p : m.padding) o.put(p.key), o.put(p.lo), o.put(p.hi);
  return std::move(o.b);
}

RankManifest manifest_from_bytes(const std::vector<uint8_t>& bytes) {
  In in{bytes};
  RankManifest m;
  m.rank = in.get<uint32_t>();
  m.file.name = in.str();
  m.file.rank = in.get<uint32_t>();
  m.file.size = in.get<uint64_t>();
  m.keys.resize(in.count(18));
  for (auto& k : m.keys) {
    k.name = in.str();
    k.dtype = static_cast<DType>(in.get<uint8_t>());
    k.kind = static_cast<ckpt::KeyKind>(in.get<uint8_t>());
    k.shape.resize(in.count(8));
    for (auto& d : k.shape) d = in.get<uint64_t>();
  }
  m.runs.resize(in.count(37));
  for (auto& r : m.runs) {
    r.file = in.get<uint32_t>(), r.dataset = in.get<uint32_t>(), r.key = in.get<uint32_t>();
    r.chunk_elems = in.get<uint32_t>(), r.lo = in.get<uint64_t>(), r.numel = in.get<uint64_t>();
    r.dtype = static_cast<DType>(in.get<uint8_t>());
    r.filters = in.get<uint32_t>();
  }
  m.chunks.resize(in.count(48));
  for (auto& c : m.chunks) {
    c.run = in.get<uint32_t>(), c.key = in.get<uint32_t>(), c.file = in.get<uint32_t>();
    c.length = in.get<uint32_t>(), c.offset = in.get<uint64_t>(), c.stored_bytes = in.get<uint32_t>();
    c.flags = in.get<uint32_t>(), c.checksum_stored = in.get<uint64_t>(), c.checksum_logical = in.get<uint64_t>();
  }
  m.padding.resize(in.count(20));
  for (auto& p : m.padding) p.key = in.get<uint32_t>(), p.lo = in.get<uint64_t>(), p.hi = in.get<uint64_t>();
  if (in.at != bytes.size()) throw InternalError("rank manifest blob has " + std::to_string(bytes.size() - in.at) + " trailing bytes");
  return m;
}

}  // namespace fpg::ckpt
