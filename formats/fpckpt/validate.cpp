#include "formats/fpckpt/validate.h"

#include <atomic>
#include <mutex>
#include <set>

#include "ckpt/coverage.h"
#include "ckpt/layout_check.h"
#include "ckpt/stored_states.h"
#include "core/printable.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/log.h"
#include "core/progress.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/reader.h"
#include "layout/layout_json.h"

namespace fpg::fpckpt {

std::vector<ckpt::Problem> check_recorded_layout(const ckpt::Index& ix, bool& checked) {
  checked = false;
  const auto layout_doc = ix.documents.get(ckpt::doc::layout);
  const auto opt_doc = ix.documents.get(ckpt::doc::optimizer);
  if (!layout_doc || !opt_doc) return {};
  auto problem = [](const std::string& msg) {
    return std::vector<ckpt::Problem>{{ckpt::ProblemKind::layout_mismatch, "", 0, 0, "", msg}};
  };
  ckpt::StoredStates stored;
  try {
    const JsonDocument opt(*opt_doc, "optimizer document");
    // A document without the state fields records nothing to check against.
    if (!opt.root().is_object() || !opt.root().has("state_layout") || !opt.root().has("states")) return {};
    stored = ckpt::read_stored_states(opt.root());
  } catch (const FormatError& e) {
    return problem(e.what());
  }
  try {
    const std::string kind = JsonDocument(*layout_doc, "layout document").root().get<std::string>("kind", "");
    checked = true;
    if (kind == "bucketed")
      return ckpt::check_layout(ix, layout::bucketed_layout_from_json(*layout_doc, "layout document"), stored.layout,
                                stored.states);
    if (kind == "layer_wise")
      return ckpt::check_layout(ix, layout::layer_wise_layout_from_json(*layout_doc, "layout document"),
                                stored.layout, stored.states, stored.matrix_states);
    checked = false;
    return problem("layout document: unknown kind " + quoted_name(kind));
  } catch (const FormatError& e) {  // the message names the layout document
    checked = false;
    return problem(e.what());
  } catch (const std::exception& e) {
    checked = false;
    return problem(std::string("layout document: ") + e.what());
  }
}

ValidateReport validate_index(const CheckpointReader& reader) {
  ValidateReport rep;
  rep.dir = reader.dir();
  const ckpt::Index& ix = reader.index();
  rep.version = ix.version;
  rep.index_checksum = ix.index_checksum;
  rep.chunk_checksums_bound = ckpt::binds_chunk_checksums(ix.version);
  rep.keys = ix.keys.size();
  rep.chunks = ix.chunks.size();
  rep.padding = ix.padding.size();
  rep.files = ix.files.size();
  if (ix.index_checksum == ckpt::IndexChecksum::mismatch)
    rep.problems.push_back({ckpt::ProblemKind::index_checksum, "", 0, 0, kIndexFile,
                            "the index was changed after it was written: " + ix.index_checksum_detail});
  auto index_problems = ckpt::check_index(ix);
  rep.problems.insert(rep.problems.end(), index_problems.begin(), index_problems.end());
  auto file_problems = ckpt::check_files(ix, rep.dir);
  rep.problems.insert(rep.problems.end(), file_problems.begin(), file_problems.end());
  auto layout_problems = check_recorded_layout(ix, rep.layout_checked);
  rep.problems.insert(rep.problems.end(), layout_problems.begin(), layout_problems.end());
  ckpt::sort_problems(rep.problems);
  return rep;
}

void require_valid(const CheckpointReader& reader, const std::string& refusing) {
  const ValidateReport rep = validate_index(reader);
  if (rep.problems.empty()) return;
  constexpr size_t kListed = 20;
  const size_t n = rep.problems.size();
  std::string msg = rep.dir + ": not a valid checkpoint (" + std::to_string(n) + " problem" + (n == 1 ? "" : "s") +
                    "); refusing to " + refusing + ":";
  for (size_t i = 0; i < n && i < kListed; ++i) msg += "\n  " + ckpt::to_string(rep.problems[i]);
  if (n > kListed) msg += "\n  ... and " + std::to_string(n - kListed) + " more (`fpgather validate` lists them all)";
  throw InvalidCheckpoint(msg);
}

std::unique_ptr<CheckpointReader> open_valid(const std::string& path, const std::string& refusing, bool validate) {
  auto reader = std::make_unique<CheckpointReader>(path, ChunkReads::direct, IndexCheck::report);
  if (validate) require_valid(*reader, refusing);
  else if (reader->index().index_checksum == ckpt::IndexChecksum::mismatch)
    spdlog::warn("{}/{} does not match its checksum ({}): read as it is, unvalidated", reader->dir(), kIndexFile,
                 reader->index().index_checksum_detail);
  return reader;
}

std::string integrity_note(const ckpt::FormatVersion& v) {
  if (ckpt::has_index_checksum(v) && ckpt::binds_chunk_checksums(v)) return "";
  return "format " + ckpt::to_string(v) +
         ": no index checksum, chunk checksums not bound to key and offset (an edited index, or a chunk under "
         "another key or offset, goes unnoticed; `fpgather convert CKPT NEW --compress zstd:1` rewrites it in "
         "format " + ckpt::to_string(ckpt::kFormatVersion) + ")";
}

ValidateReport validate_checkpoint(const std::string& path, const ValidateOptions& opts) {
  const std::string dir = resolve_checkpoint(path);
  // The index checks read the whole index: named from the start, then the bar of the data read.
  Progress progress("validate", 0, opts.progress);
  progress.phase("checking the index of " + dir);
  std::unique_ptr<CheckpointReader> reader;
  try {
    reader = std::make_unique<CheckpointReader>(dir, ChunkReads::direct, IndexCheck::report);
  } catch (const VersionError& e) {
    ValidateReport rep;
    rep.dir = dir;
    rep.readable = false;
    rep.version = e.version;
    const bool newer = e.version.major > ckpt::kFormatVersion.major;
    rep.problems.push_back({ckpt::ProblemKind::version, "", 0, 0, kIndexFile,
                            "format version " + ckpt::to_string(e.version) + " is " +
                                (newer ? "newer than this fpgather reads (up to " + ckpt::to_string(ckpt::kFormatVersion) +
                                             "); use a newer fpgather"
                                       : "older than any this fpgather reads")});
    return rep;
  }
  ValidateReport rep = validate_index(*reader);
  if (!opts.data) return rep;
  const ckpt::Index& ix = reader->index();
  std::set<std::string> bad_files;
  for (const auto& p : rep.problems)
    if (p.kind == ckpt::ProblemKind::missing_file || p.kind == ckpt::ProblemKind::truncated_file) bad_files.insert(p.file);
  std::vector<uint32_t> todo;
  for (uint32_t c = 0; c < ix.chunks.size(); ++c) {
    const auto& ch = ix.chunks[c];
    if (ch.run >= ix.runs.size() || ix.runs[ch.run].file >= ix.files.size() || ix.runs[ch.run].key >= ix.keys.size())
      continue;
    if (bad_files.count(ix.files[ix.runs[ch.run].file].name)) continue;  // already reported, unreadable
    if (ix.runs[ch.run].dtype != ix.keys[ix.runs[ch.run].key].dtype) continue;  // reported as dtype
    todo.push_back(c);
  }
  uint64_t total = 0;
  for (uint32_t c : todo) total += ix.chunks[c].stored_bytes;
  progress.set_total(total);
  std::mutex mu;
  std::atomic<uint64_t> bytes{0};
  ThreadPool& pool = opts.pool ? *opts.pool : ThreadPool::global();
  pool.parallel_for(todo.size(), [&](size_t i) {
    thread_local ckpt::CodecScratch scratch;
    thread_local std::vector<uint8_t> stored, logical;
    const uint32_t c = todo[i];
    const auto& ch = ix.chunks[c];
    const std::string err = reader->verify_chunk(c, scratch, stored, logical);
    bytes += ch.stored_bytes;
    progress.advance(ch.stored_bytes);
    if (err.empty()) return;
    const auto& run = ix.runs[ch.run];
    std::lock_guard<std::mutex> lock(mu);
    rep.problems.push_back({ckpt::ProblemKind::checksum, ix.keys[run.key].name, ch.offset, ch.hi(),
                            ix.files[run.file].name, err});
  });
  rep.chunks_read = todo.size();
  rep.bytes_read = bytes;
  ckpt::sort_problems(rep.problems);
  return rep;
}

}  // namespace fpg::fpckpt
