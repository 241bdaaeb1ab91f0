#include "layout/layout_json.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "layout/shard.h"

namespace fpg::layout {
namespace {

using json = nlohmann::json;

DType read_dtype(const JsonField& f) {
  const std::string s = f.str();
  auto t = parse_dtype(s);
  if (!t) f.fail("unknown dtype \"" + s + "\"");
  return *t;
}

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

void expect_kind(const JsonField& doc, const char* kind) {
  const JsonField k = doc.at("kind");
  if (k.str() != kind) k.fail("expected \"" + std::string(kind) + "\", got \"" + k.str() + "\"");
}

BucketedLayout bucketed_from_json(const JsonField& doc) {
  expect_kind(doc, "bucketed");
  BucketedLayout l;
  l.dp = doc.get<uint32_t>("dp");
  if (l.dp == 0) doc.at("dp").fail("must be at least 1");
  l.pad_for_nccl = doc.get<bool>("pad_for_nccl");
  if (const JsonField bs = doc.at("bucket_size"); !bs.is_null()) l.bucket_size = bs.u64();
  const JsonField bufs = doc.at("buffers");
  for (size_t i = 0; i < bufs.size(); ++i) {
    const JsonField jb = bufs[i];
    Buffer b;
    b.key.param_dtype = read_dtype(jb.at("param_dtype"));
    b.key.grad_dtype = read_dtype(jb.at("grad_dtype"));
    b.key.layer_wise = jb.get<bool>("layer_wise");
    b.numel = jb.get<uint64_t>("numel");
    const JsonField params = jb.at("params");
    for (size_t s = 0; s < params.size(); ++s) {
      const JsonField js = params[s];
      ParamSlot slot;
      slot.param = js.get<uint32_t>("index");
      slot.name = js.get<std::string>("name");
      slot.bucket = js.get<uint32_t>("bucket");
      slot.world = {js.get<uint64_t>("start"), js.get<uint64_t>("end")};
      if (slot.world.end < slot.world.begin) js.at("end").fail("before start");
      b.params.push_back(std::move(slot));
    }
    const JsonField buckets = jb.at("buckets");
    for (size_t k = 0; k < buckets.size(); ++k) {
      const JsonField jk = buckets[k];
      Bucket bk;
      bk.world = {jk.get<uint64_t>("start"), jk.get<uint64_t>("end")};
      bk.numel_unpadded = jk.get<uint64_t>("numel_unpadded");
      const JsonField slots = jk.at("slots");
      const json& v = slots.value();
      if (slots.size() != 2 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned() ||
          v[1].get<uint64_t>() < v[0].get<uint64_t>())
        slots.fail("expected [begin, end], got " + slots.dump());
      bk.slots = {v[0].get<uint64_t>(), v[1].get<uint64_t>()};
      b.buckets.push_back(std::move(bk));
    }
    if (std::string why = check_buffer(b, l.dp, l.pad_for_nccl); !why.empty()) jb.fail(why);
    for (auto& bk : b.buckets) cut_bucket(bk, b.params, l.dp);
    l.buffers.push_back(std::move(b));
  }
  // A param lives in one place only; a duplicate would give its elements two owners.
  std::vector<uint32_t> seen;
  for (const Buffer& b : l.buffers)
    for (const ParamSlot& s : b.params) seen.push_back(s.param);
  std::sort(seen.begin(), seen.end());
  if (auto dup = std::adjacent_find(seen.begin(), seen.end()); dup != seen.end())
    bufs.fail("param index " + std::to_string(*dup) + " appears twice");
  return l;
}

}  // namespace

std::string to_json(const BucketedLayout& layout, int indent) { return bucketed_to_json(layout).dump(indent); }

json to_json_value(const BucketedLayout& layout) { return bucketed_to_json(layout); }

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
  return bucketed_from_json(JsonDocument(text, source).root());
}

LayerWiseLayout layer_wise_layout_from_json(std::string_view text, const std::string& source) {
  const JsonDocument parsed(text, source);
  const JsonField doc = parsed.root();
  expect_kind(doc, "layer_wise");
  LayerWiseLayout l;
  l.dp = doc.get<uint32_t>("dp");
  if (l.dp == 0) doc.at("dp").fail("must be at least 1");
  l.fp32_matrices = doc.get<bool>("fp32_matrices");
  const JsonField ms = doc.at("matrices");
  for (size_t i = 0; i < ms.size(); ++i) {
    const JsonField jm = ms[i];
    OwnedMatrix m;
    m.param = jm.get<uint32_t>("index");
    m.name = jm.get<std::string>("name");
    m.dtype = read_dtype(jm.at("dtype"));
    if (m.dtype != DType::BF16 && m.dtype != DType::F32) jm.at("dtype").fail("must be BF16 or F32");
    const JsonField shape = jm.at("shape");
    if (shape.size() != 2 || !shape.value()[0].is_number_unsigned() || !shape.value()[1].is_number_unsigned() ||
        shape[0].u64() == 0 || shape[1].u64() == 0)
      shape.fail("expected [rows, cols] of positive integers, got " + shape.dump());
    m.rows = shape[0].u64();
    m.cols = shape[1].u64();
    try {
      m.cost = newton_schulz_cost(m.rows, m.cols);
    } catch (const UsageError& e) {
      shape.fail(e.what());
    }
    m.owner = jm.get<uint32_t>("owner");
    if (m.owner >= l.dp) jm.at("owner").fail("rank " + std::to_string(m.owner) + " >= dp " + std::to_string(l.dp));
    if (i > 0 && m.param <= l.matrices.back().param) jm.at("index").fail("not in registration order");
    l.matrices.push_back(std::move(m));
  }
  pack_layer_wise(l);
  const JsonField scalar = doc.at("scalar");
  l.scalar = bucketed_from_json(scalar);
  if (l.scalar.dp != l.dp) scalar.at("dp").fail("differs from dp");
  for (const OwnedMatrix& m : l.matrices)
    if (l.scalar.locate(m.param)) scalar.fail("param index " + std::to_string(m.param) + " is also a matrix");
  return l;
}

}  // namespace fpg::layout
