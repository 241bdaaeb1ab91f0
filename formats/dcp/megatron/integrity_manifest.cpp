#include "formats/dcp/megatron/integrity_manifest.h"

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>

#include "core/error.h"
#include "core/printable.h"
#include "core/sha256.h"
#include "core/thread_pool.h"
#include "formats/safetensors/format.h"
#include "formats/safetensors/strict_json.h"

namespace fpg::dcp {
namespace {

constexpr size_t kHashBlock = size_t{8} << 20;

bool is_hex_digest(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
         });
}

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string file_sha256(const DataFile& f, uint64_t* bytes) {
  Sha256 h;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(kHashBlock, std::max<uint64_t>(f.size(), 1))));
  for (uint64_t at = 0; at < f.size();) {
    const uint64_t n = std::min<uint64_t>(buf.size(), f.size() - at);
    f.read(at, buf.data(), n);
    h.update(buf.data(), n);
    at += n;
  }
  *bytes = f.size();
  return h.hex_digest();
}

}  // namespace

std::optional<IntegrityManifest> read_integrity_manifest(const CheckpointDir& dir) {
  if (!dir.has_regular_file(kIntegrityFile)) return std::nullopt;
  const auto f = dir.open(kIntegrityFile);
  if (f->size() > kMaxIntegrityJson)
    throw FormatError(f->path() + ": " + std::to_string(f->size()) + " bytes, more than the " +
                      std::to_string(kMaxIntegrityJson) + " accepted");
  std::vector<char> text(static_cast<size_t>(f->size()));
  f->read(0, text.data(), text.size());
  const nlohmann::json j = safetensors::parse_strict_json(f->path(), "integrity manifest", text.data(), text.size());
  if (!j.is_object()) throw FormatError(f->path() + ": not a JSON object");
  IntegrityManifest m;
  // Megatron reads a missing algorithm as sha256.
  m.algorithm = "sha256";
  if (const auto a = j.find("algorithm"); a != j.end()) {
    if (!a->is_string()) throw FormatError(f->path() + ": \"algorithm\" is " + a->dump(-1, ' ', true) + ", not a string");
    m.algorithm = a->get<std::string>();
    if (m.algorithm != "sha256")
      throw FormatError(f->path() + ": algorithm " + safetensors::quote_name(m.algorithm) +
                        ", not \"sha256\" (the only one Megatron-Core writes)");
  }
  const auto files = j.find("files");
  if (files == j.end() || !files->is_object()) throw FormatError(f->path() + ": no \"files\" object");
  std::set<std::string> seen;
  for (auto it = files->begin(); it != files->end(); ++it) {
    const std::string& name = it.key();
    if (!CheckpointDir::is_plain_name(name))
      throw FormatError(f->path() + ": file " + safetensors::quote_name(name) +
                        " is not a plain file name of the checkpoint directory");
    if (!it.value().is_string() || !is_hex_digest(it.value().get<std::string>()))
      throw FormatError(f->path() + ": file " + safetensors::quote_name(name) + ": digest " +
                        it.value().dump(-1, ' ', true) + " is not 64 hex digits");
    if (!seen.insert(name).second)
      throw FormatError(f->path() + ": file " + safetensors::quote_name(name) + " listed twice");
    m.files.emplace_back(name, lower(it.value().get<std::string>()));
  }
  return m;
}

IntegrityCheck check_integrity(const CheckpointDir& dir, const IntegrityManifest& m, bool hash) {
  IntegrityCheck out;
  std::set<std::string> listed;
  std::vector<size_t> present;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const std::string& name = m.files[i].first;
    listed.insert(name);
    if (dir.has_regular_file(name)) {
      present.push_back(i);
      continue;
    }
    ckpt::Problem p;
    p.kind = ckpt::ProblemKind::missing_file;
    p.file = name;
    p.message = std::string("listed in ") + kIntegrityFile + " but not a regular file of the checkpoint";
    out.problems.push_back(std::move(p));
  }
  out.files = present.size();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir.path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == kIntegrityFile || listed.count(name)) continue;
    if (dir.has_regular_file(name)) out.unlisted.push_back(name);
  }
  std::sort(out.unlisted.begin(), out.unlisted.end());
  if (!hash) return out;

  std::mutex mu;
  ThreadPool::global().parallel_for(present.size(), [&](size_t k) {
    const auto& [name, want] = m.files[present[k]];
    ckpt::Problem p;
    p.file = name;
    uint64_t bytes = 0;
    try {
      const std::string got = file_sha256(*dir.open(name), &bytes);
      if (got == want) {
        std::lock_guard<std::mutex> lock(mu);
        out.bytes += bytes;
        return;
      }
      p.kind = ckpt::ProblemKind::checksum;
      p.message = "SHA-256 " + got.substr(0, 16) + "…, " + kIntegrityFile + " records " + want.substr(0, 16) + "…";
    } catch (const FormatError& e) {
      p.kind = ckpt::ProblemKind::missing_file;
      p.message = std::string("cannot be hashed: ") + e.what();
    }
    std::lock_guard<std::mutex> lock(mu);
    out.bytes += bytes;
    out.problems.push_back(std::move(p));
  });
  std::sort(out.problems.begin(), out.problems.end(),
            [](const ckpt::Problem& a, const ckpt::Problem& b) { return a.file < b.file; });
  return out;
}

}  // namespace fpg::dcp
