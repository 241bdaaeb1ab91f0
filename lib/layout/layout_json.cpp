#include "layout/layout_json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "layout/shard.h"

namespace fpg::layout {
namespace {

using json = nlohmann::json;

// Reads fields of one JSON document, naming `source` and the field path in every error.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw FormatError(source_ + ": " + field + ": " + msg);
  }
  const json& at(const json& obj, const std::string& path, const char* key) const {
    if (!obj.is_object()) fail(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(join(path, key), "missing");
    return *it;
  }
  uint64_t u64(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key);
    if (!v.is_number_unsigned()) fail(join(path, key), "expected a non-negative integer, got " + v.dump());
    return v.get<uint64_t>();
  }
  uint32_t u32(const json& obj, const std::string& path, const char* key) const {
    const uint64_t x = u64(obj, path, key);
    if (x > UINT32_MAX) fail(join(path, key), "out of range");
    return static_cast<uint32_t>(x);
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key);
    if (!v.is_boolean()) fail(join(path, key), "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string str(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key);
    if (!v.is_string()) fail(join(path, key), "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  DType dtype(const json& obj, const std::string& path, const char* key) const {
    const std::string s = str(obj, path, key);
    auto t = parse_dtype(s);
    if (!t) fail(join(path, key), "unknown dtype \"" + s + "\"");
    return *t;
  }
  const json& array(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key);
    if (!v.is_array()) fail(join(path, key), "expected an array");
    return v;
  }
  Range pair(const json& obj, const std::string& path, const char* key) const {
    const json& v = array(obj, path, key);
    if (v.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned() ||
        v[1].get<uint64_t>() < v[0].get<uint64_t>())
      fail(join(path, key), "expected [begin, end], got " + v.dump());
    return {v[0].get<uint64_t>(), v[1].get<uint64_t>()};
  }
  json parse(std::string_view text) const {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      fail("(document)", std::string("invalid JSON: ") + e.what());
    }
  }
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

 private:
  std::string source_;
};

json bucketed_to_json(const BucketedLayout& l) {
  json bufs = json::array();
  for (const Buffer& b : l.buffers) {
    json buckets = json::array();
    for (const Bucket& k : b.buckets)
      buckets.push_back({{"start", k.world.begin},
                         {"end", k.world.end},
                         {"numel_unpadded", k.numel_unpadded},
                         {"slots", {k.slots.begin, k.slots.end}}});
    json params = json::array();
    for (const ParamSlot& s : b.params)
      params.push_back(
          {{"index", s.param}, {"name", s.name}, {"bucket", s.bucket}, {"start", s.world.begin}, {"end", s.world.end}});
    bufs.push_back({{"param_dtype", std::string(dtype_name(b.key.param_dtype))},
                    {"grad_dtype", std::string(dtype_name(b.key.grad_dtype))},
                    {"layer_wise", b.key.layer_wise},
                    {"numel", b.numel},
                    {"buckets", std::move(buckets)},
                    {"params", std::move(params)}});
  }
  json j = {{"kind", "bucketed"}, {"dp", l.dp}, {"pad_for_nccl", l.pad_for_nccl}, {"buffers", std::move(bufs)}};
  j["bucket_size"] = l.bucket_size ? json(*l.bucket_size) : json(nullptr);
  return j;
}

void expect_kind(const Reader& rd, const json& doc, const std::string& path, const char* kind) {
  const std::string k = rd.str(doc, path, "kind");
  if (k != kind) rd.fail(Reader::join(path, "kind"), "expected \"" + std::string(kind) + "\", got \"" + k + "\"");
}

BucketedLayout bucketed_from_json(const Reader& rd, const json& doc, const std::string& path) {
  expect_kind(rd, doc, path, "bucketed");
  BucketedLayout l;
  l.dp = rd.u32(doc, path, "dp");
  if (l.dp == 0) rd.fail(Reader::join(path, "dp"), "must be at least 1");
  l.pad_for_nccl = rd.boolean(doc, path, "pad_for_nccl");
  const json& bs = rd.at(doc, path, "bucket_size");
  if (!bs.is_null()) l.bucket_size = rd.u64(doc, path, "bucket_size");
  const json& bufs = rd.array(doc, path, "buffers");
  for (size_t i = 0; i < bufs.size(); ++i) {
    const std::string bp = Reader::index(Reader::join(path, "buffers"), i);
    const json& jb = bufs[i];
    Buffer b;
    b.key.param_dtype = rd.dtype(jb, bp, "param_dtype");
    b.key.grad_dtype = rd.dtype(jb, bp, "grad_dtype");
    b.key.layer_wise = rd.boolean(jb, bp, "layer_wise");
    b.numel = rd.u64(jb, bp, "numel");
    const json& params = rd.array(jb, bp, "params");
    for (size_t s = 0; s < params.size(); ++s) {
      const std::string sp = Reader::index(Reader::join(bp, "params"), s);
      ParamSlot slot;
      slot.param = rd.u32(params[s], sp, "index");
      slot.name = rd.str(params[s], sp, "name");
      slot.bucket = rd.u32(params[s], sp, "bucket");
      slot.world = {rd.u64(params[s], sp, "start"), rd.u64(params[s], sp, "end")};
      if (slot.world.end < slot.world.begin) rd.fail(Reader::join(sp, "end"), "before start");
      b.params.push_back(std::move(slot));
    }
    const json& buckets = rd.array(jb, bp, "buckets");
    for (size_t k = 0; k < buckets.size(); ++k) {
      const std::string kp = Reader::index(Reader::join(bp, "buckets"), k);
      Bucket bk;
      bk.world = {rd.u64(buckets[k], kp, "start"), rd.u64(buckets[k], kp, "end")};
      bk.numel_unpadded = rd.u64(buckets[k], kp, "numel_unpadded");
      bk.slots = rd.pair(buckets[k], kp, "slots");
      b.buckets.push_back(std::move(bk));
    }
    if (std::string why = check_buffer(b, l.dp, l.pad_for_nccl); !why.empty()) rd.fail(bp, why);
    for (auto& bk : b.buckets) cut_bucket(bk, b.params, l.dp);
    l.buffers.push_back(std::move(b));
  }
  // A param lives in one place only; a duplicate would give its elements two owners.
  std::vector<uint32_t> seen;
  for (const Buffer& b : l.buffers)
    for (const ParamSlot& s : b.params) seen.push_back(s.param);
  std::sort(seen.begin(), seen.end());
  if (auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end())
    rd.fail(Reader::join(path, "buffers"), "param index " + std::to_string(*dup) + " appears twice");
  return l;
}

}  // namespace

std::string to_json(const BucketedLayout& layout, int indent) { return bucketed_to_json(layout).dump(indent); }

std::string to_json(const LayerWiseLayout& layout, int indent) {
  json ms = json::array();
  for (const OwnedMatrix& m : layout.matrices)
    ms.push_back({{"index", m.param},
                  {"name", m.name},
                  {"dtype", std::string(dtype_name(m.dtype))},
                  {"shape", {m.rows, m.cols}},
                  {"owner", m.owner}});
  json j = {{"kind", "layer_wise"},
            {"dp", layout.dp},
            {"fp32_matrices", layout.fp32_matrices},
            {"matrices", std::move(ms)},
            {"scalar", bucketed_to_json(layout.scalar)}};
  return j.dump(indent);
}

BucketedLayout bucketed_layout_from_json(std::string_view text, const std::string& source) {
  Reader rd(source);
  return bucketed_from_json(rd, rd.parse(text), "");
}

LayerWiseLayout layer_wise_layout_from_json(std::string_view text, const std::string& source) {
  Reader rd(source);
  const json doc = rd.parse(text);
  expect_kind(rd, doc, "", "layer_wise");
  LayerWiseLayout l;
  l.dp = rd.u32(doc, "", "dp");
  if (l.dp == 0) rd.fail("dp", "must be at least 1");
  l.fp32_matrices = rd.boolean(doc, "", "fp32_matrices");
  const json& ms = rd.array(doc, "", "matrices");
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string mp = Reader::index("matrices", i);
    OwnedMatrix m;
    m.param = rd.u32(ms[i], mp, "index");
    m.name = rd.str(ms[i], mp, "name");
    m.dtype = rd.dtype(ms[i], mp, "dtype");
    if (m.dtype != DType::BF16 && m.dtype != DType::F32) rd.fail(mp + ".dtype", "must be BF16 or F32");
    const json& shape = rd.array(ms[i], mp, "shape");
    if (shape.size() != 2 || !shape[0].is_number_unsigned() || !shape[1].is_number_unsigned() ||
        shape[0].get<uint64_t>() == 0 || shape[1].get<uint64_t>() == 0)
      rd.fail(mp + ".shape", "expected [rows, cols] of positive integers, got " + shape.dump());
    m.rows = shape[0].get<uint64_t>();
    m.cols = shape[1].get<uint64_t>();
    try {
      m.cost = newton_schulz_cost(m.rows, m.cols);
    } catch (const UsageError& e) {
      rd.fail(mp + ".shape", e.what());
    }
    m.owner = rd.u32(ms[i], mp, "owner");
    if (m.owner >= l.dp) rd.fail(mp + ".owner", "rank " + std::to_string(m.owner) + " >= dp " + std::to_string(l.dp));
    if (i > 0 && m.param <= l.matrices.back().param) rd.fail(mp + ".index", "not in registration order");
    l.matrices.push_back(std::move(m));
  }
  pack_layer_wise(l);
  l.scalar = bucketed_from_json(rd, rd.at(doc, "", "scalar"), "scalar");
  if (l.scalar.dp != l.dp) rd.fail("scalar.dp", "differs from dp");
  for (const OwnedMatrix& m : l.matrices)
    if (l.scalar.locate(m.param)) rd.fail("scalar", "param index " + std::to_string(m.param) + " is also a matrix");
  return l;
}

}  // namespace fpg::layout
