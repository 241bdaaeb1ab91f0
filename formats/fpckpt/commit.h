// Atomic commit of a checkpoint directory (man/fpgather-format.5, "Commit and latest"): every rank
// writes into a staging directory beside the target; the committing rank merges the ranks' manifests
// into the index, writes index.h5 last (fsynced), fsyncs the staging directory, renames it to the
// target in one rename(), and fsyncs the parent. A crash leaves either no checkpoint or a complete
// one (a stale staging directory, ".NAME.tmp-*", is never read; recovery.h removes it). `latest` in a
// checkpoint root names the newest complete checkpoint and is replaced atomically.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <future>
#include <string>
#include <vector>

#include "ckpt/index.h"
#include "core/thread_start.h"
#include "formats/fpckpt/rank_writer.h"

namespace fpg::fpckpt {

constexpr const char* kLatestFile = "latest";
// ".NAME" + this: a checkpoint retention is deleting (apply_retention).
constexpr const char* kDeletingSuffix = ".deleting";

// A staging directory and the lock its writer holds on it: an exclusive flock(2) on the directory
// from its creation until this object is destroyed, so that crash recovery (recovery.h) tells a
// live save's directory from a dead one's. Destroying it releases the lock only: the directory has
// been renamed by commit() or must be removed by the owner first.
class StagingDir {
 public:
  StagingDir() = default;
  StagingDir(std::string path, int lock_fd) : path_(std::move(path)), fd_(lock_fd) {}
  StagingDir(StagingDir&& o) noexcept;
  StagingDir& operator=(StagingDir&& o) noexcept;
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  ~StagingDir();

  const std::string& path() const { return path_; }
  bool empty() const { return path_.empty(); }

 private:
  std::string path_;
  int fd_ = -1;  // -1: the file system offers no flock; recovery then leaves the directory alone
};

// Creates and locks the staging directory ".NAME.tmp-<16 hex digits>" beside `target`, after
// removing the stale staging of `target` (core/staging.h). UsageError if `target` exists.
StagingDir begin_staging(const std::string& target);

// Merges the manifests (any order; ranks that wrote nothing may be absent) with the documents into an
// index: keys by name (UsageError on a dtype/shape/kind conflict), files in rank order, runs and
// chunks renumbered, padding sorted and adjacent intervals merged.
ckpt::Index merge_manifests(const std::vector<RankManifest>& manifests, const ckpt::Documents& documents);

// Writes the index into `staging` and renames it to `target` (fsyncs as above).
void commit(const std::string& staging, const std::string& target, const ckpt::Index& index);

// The last step of every commit, for any format whose files are complete and fsynced in `staging`:
// fsyncs `staging`, renames it to `target` (UsageError if `target` appeared meanwhile) and fsyncs the
// parent directory. Interrupted, committing nothing, once a signal stopped the work (core/interrupt.h).
void publish_staging(const std::string& staging, const std::string& target);

// Replaces ROOT/latest with "NAME\n" atomically. NAME must be a plain directory name in ROOT.
void update_latest(const std::string& root, const std::string& name);

// The first line of ROOT/latest, trimmed; "" if there is none.
std::string latest_name(const std::string& root);

// Where a checkpoint is expected: a directory holding `latest` stands for the checkpoint it names.
// Returns the checkpoint directory; FormatError if `latest` names something that is not there or is
// not a regular file.
std::string resolve_checkpoint(const std::string& path);

// Keeps the `keep` newest complete checkpoints in ROOT (subdirectories holding index.h5, newest by
// name: step-%08d names sort by step) and the one `latest` names; removes the others, each first
// renamed ".NAME.deleting" so that a deletion cut short is finished by the next recovery (recovery.h)
// instead of leaving a half-deleted checkpoint. Returns the names removed. keep == 0 keeps all.
std::vector<std::string> apply_retention(const std::string& root, size_t keep);

// The whole save for a process that writes every rank itself (the threads backend, tests, benches),
// or for the committing rank of a save whose ranks write elsewhere (commit's `others`): fpgather's
// ckpt::StateSave. Not committed when destroyed: the staging directory is removed.
class CheckpointWriter final : public ckpt::StateSave {
 public:
  CheckpointWriter(std::string target, WriteOptions opts = {});
  ~CheckpointWriter() override;
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Created on first use; InternalError once finish_rank(r) was called, or for r >= ckpt::kMaxRanks.
  RankWriter& rank(uint32_t r) override;
  ckpt::Documents& documents() override { return documents_; }
  // Starts finishing rank r (RankWriter::finish: its chunks written, its file closed and fsynced)
  // on a thread of its own and returns: a caller done with one rank while it writes the next
  // (reshard) overlaps the closing and fsync of the one with the writing of the other. Rank r is
  // not written to afterwards; commit() waits for it and throws its error. No-op for a rank that
  // was never created or is finishing already.
  void finish_rank(uint32_t r);
  // Finishes every rank (those not finishing yet all at once, each on a thread of its own, so that
  // their files' closing and fsyncs overlap), merges their manifests and `others` (ranks written by
  // other threads or processes into staging()), writes the index, commits. Returns the committed index.
  ckpt::Index commit(std::vector<RankManifest> others = {}) override;
  const std::string& staging() const override { return staging_.path(); }

 private:
  // Waits for the oldest rank being finished; keeps its manifest, or the first error for commit().
  void reap_one();

  std::string target_;
  StagingDir staging_;
  WriteOptions opts_;
  std::vector<std::unique_ptr<RankWriter>> ranks_;
  std::vector<bool> finishing_started_;  // by rank
  std::deque<AsyncTask<RankManifest>> finishing_;  // oldest first
  std::vector<RankManifest> finished_;
  std::exception_ptr finish_error_;
  ckpt::Documents documents_;
  bool committed_ = false;
};

}  // namespace fpg::fpckpt
