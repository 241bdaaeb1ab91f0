#include "formats/fpckpt/summary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "ckpt/documents.h"

namespace fpg::fpckpt {
namespace {

nlohmann::json doc_json(const ckpt::Index& ix, const char* name) {
  const auto text = ix.documents.get(name);
  if (!text) return nullptr;
  try {
    return nlohmann::json::parse(*text);
  } catch (const std::exception&) {
    return "(not JSON)";
  }
}

std::string scalar_text(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "";
  return j.dump();
}

}  // namespace

Summary summarize(const ckpt::Index& ix) {
  Summary s;
  s.format_version = ckpt::to_string(ix.version);
  s.producer = ix.producer;
  for (const auto& [n, t] : ix.documents.all()) s.documents.push_back(n);
  if (auto o = doc_json(ix, ckpt::doc::optimizer); o.is_object()) {
    if (o.contains("step")) s.step = scalar_text(o["step"]);
    if (o.contains("step") && o["step"].is_number_unsigned()) s.step_count = o["step"].get<uint64_t>();
    s.optimizer = scalar_text(o.value("name", nlohmann::json()));
    s.optimizer_json = {{"name", o.value("name", nlohmann::json())}, {"state_layout", o.value("state_layout", nlohmann::json())}};
    if (o.contains("state_layout")) s.optimizer += (s.optimizer.empty() ? "" : ", ") + std::string("state layout ") + scalar_text(o["state_layout"]);
  }
  if (auto m = doc_json(ix, ckpt::doc::model); m.is_object()) {
    s.model = scalar_text(m.value("name", nlohmann::json()));
    s.model_json = {{"name", m.value("name", nlohmann::json())},
                    {"params", m.contains("params") && m["params"].is_array() ? nlohmann::json(m["params"].size()) : nlohmann::json()}};
    if (m.contains("params") && m["params"].is_array())
      s.model += (s.model.empty() ? "" : ", ") + std::to_string(m["params"].size()) + " params";
  }
  if (auto l = doc_json(ix, ckpt::doc::layout); l.is_object()) {
    s.layout = scalar_text(l.value("kind", nlohmann::json()));
    s.layout_json = {{"kind", l.value("kind", nlohmann::json())}, {"dp", l.value("dp", nlohmann::json())}};
    if (l.contains("dp")) s.layout += ", dp " + scalar_text(l["dp"]);
    if (l.contains("dp") && l["dp"].is_number_unsigned()) s.dp = l["dp"].get<uint64_t>();
  }
  if (auto f = doc_json(ix, ckpt::doc::fp8); f.is_object()) {
    s.fp8 = scalar_text(f.value("recipe", nlohmann::json()));
    s.fp8_json = {{"enabled", f.value("enabled", nlohmann::json())}, {"recipe", f.value("recipe", nlohmann::json())}};
  }

  s.keys.resize(ix.keys.size());
  for (size_t k = 0; k < ix.keys.size(); ++k) {
    const auto& key = ix.keys[k];
    KeyRow& r = s.keys[k];
    r.name = key.name;
    r.kind = key.kind;
    r.dtype = key.dtype;
    r.shape = key.shape;
    r.numel = key.numel();
  }
  for (const auto& c : ix.chunks) {
    if (c.run >= ix.runs.size() || ix.runs[c.run].key >= ix.keys.size()) continue;
    KeyRow& r = s.keys[ix.runs[c.run].key];
    ++r.chunks;
    r.stored_bytes += c.stored_bytes;
    r.logical_bytes += dtype_bytes(r.dtype, c.length);
  }
  for (const auto& p : ix.padding) {
    if (p.key >= ix.keys.size() || p.hi < p.lo) continue;
    ++s.keys[p.key].padding_intervals;
    s.keys[p.key].padding_elems += p.hi - p.lo;
  }
  for (const auto& r : s.keys) {
    const auto kind = static_cast<size_t>(r.kind) < ckpt::kKeyKindCount ? static_cast<size_t>(r.kind) : ckpt::kKeyKindCount - 1;
    for (KindSizes* ks : {&s.by_kind[kind], &s.total}) {
      ++ks->keys;
      ks->numel += r.numel;
      ks->logical_bytes += r.logical_bytes;
      ks->stored_bytes += r.stored_bytes;
      ks->chunks += r.chunks;
      ks->padding_elems += r.padding_elems;
    }
  }
  s.files = ix.files.size();
  for (const auto& f : ix.files) s.file_bytes += f.size;
  s.runs = ix.runs.size();
  s.compression_ratio = s.total.stored_bytes ? static_cast<double>(s.total.logical_bytes) / s.total.stored_bytes : 1.0;
  return s;
}

KeyDetail describe_key(const ckpt::Index& ix, uint32_t key) {
  KeyDetail d;
  for (const auto& ch : ix.chunks) {
    if (ch.run >= ix.runs.size() || ix.runs[ch.run].key != key) continue;
    const ckpt::Run& run = ix.runs[ch.run];
    ChunkRow row;
    row.lo = ch.offset;
    row.hi = ch.hi();
    if (run.file < ix.files.size()) row.file = ix.files[run.file].name;
    row.dataset = run.dataset;
    if (run.chunk_elems > 0 && ch.offset >= run.lo) row.chunk = (ch.offset - run.lo) / run.chunk_elems;
    row.stored_bytes = ch.stored_bytes;
    row.flags = ch.flags;
    row.checksum_stored = ch.checksum_stored;
    row.checksum_logical = ch.checksum_logical;
    d.chunks.push_back(std::move(row));
  }
  std::stable_sort(d.chunks.begin(), d.chunks.end(), [](const ChunkRow& a, const ChunkRow& b) { return a.lo < b.lo; });
  for (const auto& p : ix.padding)
    if (p.key == key) d.padding.emplace_back(p.lo, p.hi);
  return d;
}

}  // namespace fpg::fpckpt
