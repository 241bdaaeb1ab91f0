#include "formats/fpckpt/commit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <unordered_map>

#include "core/printable.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/staging.h"
#include "formats/fpckpt/index_file.h"

namespace fpg::fpckpt {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

StagingDir::StagingDir(StagingDir&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) {
  o.path_.clear();
  o.fd_ = -1;
}

StagingDir& StagingDir::operator=(StagingDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.path_.clear();
    o.fd_ = -1;
  }
  return *this;
}

StagingDir::~StagingDir() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

StagingDir begin_staging(const std::string& target) {
  std::string t = target;
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  if (fs::exists(t)) throw UsageError(t + ": already exists; a checkpoint is never written over another");
  const auto [dir, name] = fs::split_path(t);
  if (!fs::is_directory(dir)) throw UsageError(t + ": parent directory " + dir + " does not exist");
  fs::remove_stale_staging_beside(t);
  std::random_device rd;
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%08x%08x", rd(), rd());
  const std::string staging = fs::join_path(dir, "." + name + ".tmp-" + suffix);
  if (mkdir(staging.c_str(), 0755) != 0) throw FormatError(staging + ": cannot create: " + std::strerror(errno));
  // Locked a moment after mkdir: recovery leaves a directory modified in the last minute alone.
  int fd = ::open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0 && !fs::lock_staging(fd)) {
    ::close(fd);
    fd = -1;
  }
  spdlog::debug("staging {} for {}", staging, t);
  return StagingDir(staging, fd);
}

ckpt::Index merge_manifests(const std::vector<RankManifest>& manifests, const ckpt::Documents& documents) {
  ckpt::Index ix;
  ix.version = ckpt::kFormatVersion;
  ix.producer = std::string("fpgather ") + FPGATHER_VERSION;
  ix.documents = documents;
  std::vector<const RankManifest*> order;
  for (const auto& m : manifests) order.push_back(&m);
  std::sort(order.begin(), order.end(), [](const RankManifest* a, const RankManifest* b) { return a->rank < b->rank; });
  std::unordered_map<std::string, uint32_t> key_of;
  for (const RankManifest* m : order) {
    std::vector<uint32_t> key_map(m->keys.size());
    for (size_t k = 0; k < m->keys.size(); ++k) {
      const ckpt::Key& key = m->keys[k];
      const auto it = key_of.find(key.name);
      if (it == key_of.end()) {
        key_map[k] = static_cast<uint32_t>(ix.keys.size());
        key_of.emplace(key.name, key_map[k]);
        ix.keys.push_back(key);
      } else {
        const ckpt::Key& prev = ix.keys[it->second];
        if (prev.dtype != key.dtype || prev.shape != key.shape || prev.kind != key.kind)
          throw UsageError("checkpoint key " + quoted_name(key.name) + ": rank " + std::to_string(m->rank) + " declares " +
                           std::string(dtype_name(key.dtype)) + " " + shape_string(key.shape) + ", another rank " +
                           std::string(dtype_name(prev.dtype)) + " " + shape_string(prev.shape));
        key_map[k] = it->second;
      }
    }
    const uint32_t file = static_cast<uint32_t>(ix.files.size());
    if (!m->file.name.empty()) ix.files.push_back(m->file);
    else if (!m->runs.empty()) throw InternalError("rank manifest has runs but no file");
    const uint32_t run0 = static_cast<uint32_t>(ix.runs.size());
    for (ckpt::Run r : m->runs) {
      r.file = file;
      r.key = key_map.at(r.key);
      ix.runs.push_back(r);
    }
    for (ckpt::Chunk c : m->chunks) {
      c.run += run0;
      ix.chunks.push_back(c);
    }
    for (ckpt::Padding p : m->padding) {
      p.key = key_map.at(p.key);
      ix.padding.push_back(p);
    }
  }
  // Chunks by key and offset: the order the coverage sweep wants (it then skips its sort).
  ix.link_chunks();
  std::vector<uint32_t> run_map(ix.runs.size());
  {
    std::vector<uint32_t> order_runs(ix.runs.size());
    for (uint32_t i = 0; i < order_runs.size(); ++i) order_runs[i] = i;
    std::stable_sort(order_runs.begin(), order_runs.end(), [&](uint32_t a, uint32_t b) {
      return ix.runs[a].key != ix.runs[b].key ? ix.runs[a].key < ix.runs[b].key : ix.runs[a].lo < ix.runs[b].lo;
    });
    std::vector<ckpt::Run> runs(ix.runs.size());
    for (uint32_t i = 0; i < order_runs.size(); ++i) {
      runs[i] = ix.runs[order_runs[i]];
      run_map[order_runs[i]] = i;
    }
    ix.runs = std::move(runs);
  }
  for (auto& c : ix.chunks) c.run = run_map[c.run];
  std::stable_sort(ix.chunks.begin(), ix.chunks.end(), [](const ckpt::Chunk& a, const ckpt::Chunk& b) {
    return a.run != b.run ? a.run < b.run : a.offset < b.offset;
  });
  ix.link_chunks();
  std::sort(ix.padding.begin(), ix.padding.end(), [](const ckpt::Padding& a, const ckpt::Padding& b) {
    return a.key != b.key ? a.key < b.key : a.lo < b.lo;
  });
  std::vector<ckpt::Padding> merged;
  for (const auto& p : ix.padding) {
    if (!merged.empty() && merged.back().key == p.key && merged.back().hi == p.lo) merged.back().hi = p.hi;
    else merged.push_back(p);
  }
  ix.padding = std::move(merged);
  return ix;
}

void commit(const std::string& staging, const std::string& target, const ckpt::Index& index) {
  write_index(fs::join_path(staging, kIndexFile), index);
  publish_staging(staging, target);
}

void publish_staging(const std::string& staging, const std::string& target) {
  check_interrupt();  // a run stopped by a signal commits nothing
  fs::fsync_directory(staging);
  if (fs::exists(target)) throw UsageError(target + ": already exists; a checkpoint is never written over another");
  fs::rename_into_place(staging, target);
  fs::fsync_directory(fs::split_path(target).first);
  spdlog::info("committed {}", target);
}

void update_latest(const std::string& root, const std::string& name) {
  if (!ckpt::valid_file_name(name)) throw UsageError("latest: " + quoted_name(name) + " is not a plain directory name");
  fs::write_file_atomic(fs::join_path(root, kLatestFile), name + "\n");
}

std::string latest_name(const std::string& root) {
  std::ifstream in(fs::join_path(root, kLatestFile));
  std::string name;
  if (in) std::getline(in, name);
  return trim(name);
}

std::string resolve_checkpoint(const std::string& path) {
  const std::string latest = fs::join_path(path, kLatestFile);
  if (!fs::exists(latest)) return path;
  // Only a regular file is read: a FIFO would block, a symbolic link could name any file.
  if (!fs::is_regular_file(latest, false)) throw FormatError(latest + ": not a regular file");
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  name = trim(name);
  if (!ckpt::valid_file_name(name)) throw FormatError(latest + ": " + quoted_name(name) + " is not a plain checkpoint name");
  const std::string dir = fs::join_path(path, name);
  if (!fs::is_directory(dir)) throw FormatError(latest + ": names " + name + ", which is not a directory in " + path);
  return dir;
}

std::vector<std::string> apply_retention(const std::string& root, size_t keep) {
  std::vector<std::string> removed;
  if (keep == 0) return removed;
  std::vector<std::string> ckpts;
  DIR* d = opendir(root.c_str());
  if (!d) throw FormatError(root + ": cannot list: " + std::strerror(errno));
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.') continue;  // staging directories and hidden files are not checkpoints
    if (fs::exists(fs::join_path(fs::join_path(root, n), kIndexFile))) ckpts.push_back(n);
  }
  closedir(d);
  std::sort(ckpts.begin(), ckpts.end());
  const std::string latest = latest_name(root);
  if (ckpts.size() <= keep) return removed;
  for (size_t i = 0; i + keep < ckpts.size(); ++i) {
    if (ckpts[i] == latest) continue;
    // Out of sight first, in one rename: what a kill leaves is a hidden ".NAME.deleting" that
    // recovery finishes, never a checkpoint with some of its files gone.
    const std::string doomed = fs::join_path(root, "." + ckpts[i] + kDeletingSuffix);
    fs::remove_tree(doomed);
    if (rename(fs::join_path(root, ckpts[i]).c_str(), doomed.c_str()) != 0)
      throw FormatError(fs::join_path(root, ckpts[i]) + ": cannot rename for deletion: " + std::strerror(errno));
    fs::remove_tree(doomed);
    removed.push_back(ckpts[i]);
  }
  if (!removed.empty()) fs::fsync_directory(root);
  return removed;
}

CheckpointWriter::CheckpointWriter(std::string target, WriteOptions opts) : target_(std::move(target)), opts_(opts) {
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  staging_ = begin_staging(target_);
}

CheckpointWriter::~CheckpointWriter() {
  if (!committed_) {
    while (!finishing_.empty()) reap_one();
    ranks_.clear();
    fs::remove_tree(staging_.path());
  }
}

RankWriter& CheckpointWriter::rank(uint32_t r) {
  if (committed_) throw InternalError("CheckpointWriter used after commit()");
  if (r >= ckpt::kMaxRanks) throw InternalError("CheckpointWriter: rank " + std::to_string(r) + " is beyond the most ranks");
  if (r >= ranks_.size()) {
    ranks_.resize(size_t{r} + 1);
    finishing_started_.resize(size_t{r} + 1);
  }
  if (finishing_started_[r]) throw InternalError("CheckpointWriter: rank " + std::to_string(r) + " used after finish_rank");
  if (!ranks_[r]) ranks_[r] = std::make_unique<RankWriter>(staging_.path(), r, opts_);
  return *ranks_[r];
}

namespace {
// Files closed and fsynced at once: enough for a disk to take their last writes together.
constexpr size_t kFinishingAtOnce = 8;
}  // namespace

void CheckpointWriter::finish_rank(uint32_t r) {
  if (r >= ranks_.size() || !ranks_[r] || finishing_started_[r]) return;
  while (!finishing_.empty() && (finishing_.size() >= kFinishingAtOnce ||
                                 finishing_.front().ready()))
    reap_one();
  RankWriter* w = ranks_[r].get();
  finishing_.push_back(start_async([w] { return w->finish(); }));
  finishing_started_[r] = true;  // only once its finish() runs: commit() finishes the others
}

void CheckpointWriter::reap_one() {
  AsyncTask<RankManifest> f = std::move(finishing_.front());
  finishing_.pop_front();
  try {
    finished_.push_back(f.get());
  } catch (...) {
    if (!finish_error_) finish_error_ = std::current_exception();
  }
}

ckpt::Index CheckpointWriter::commit(std::vector<RankManifest> others) {
  if (committed_) throw InternalError("CheckpointWriter::commit called twice");
  for (uint32_t r = 0; r < ranks_.size(); ++r) finish_rank(r);
  while (!finishing_.empty()) reap_one();
  if (finish_error_) std::rethrow_exception(finish_error_);
  for (RankManifest& m : others) finished_.push_back(std::move(m));
  ckpt::Index ix = merge_manifests(finished_, documents_);
  fpckpt::commit(staging_.path(), target_, ix);
  committed_ = true;
  staging_ = StagingDir();
  ranks_.clear();
  return ix;
}

}  // namespace fpg::fpckpt
