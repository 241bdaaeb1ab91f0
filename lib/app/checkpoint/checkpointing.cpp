#include "app/checkpoint/checkpointing.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "app/checkpoint/state_documents.h"
#include "app/checkpoint/state_load.h"
#include "app/checkpoint/state_save.h"
#include "app/train/safetensors_init.h"
#include "app/train/train_setup.h"
#include "ckpt/manifest_blob.h"
#include "ckpt/state_store.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/log.h"

namespace fpg::app::checkpoint {
namespace {

using fs::join_path;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What the rank threads share: rank 0's staging directory (removed if the run fails before the
// commit) and the log.
struct Session {
  std::mutex mu;
  std::unique_ptr<ckpt::StateSave> staging;  // rank 0's, while a save is under way
  std::string saving;  // the checkpoint being saved, while its staging exists
  CheckpointLog log;
};

void ensure_root(const std::string& root) {
  if (fs::exists(root, true)) {
    if (!fs::is_directory(root))
      throw UsageError(Message(Field{"save"}, " ", root, ": not a directory (a checkpoint root is one)"));
  } else if (mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    throw UsageError(Message(Field{"save"}, " ", root, ": cannot create: ", std::strerror(errno)));
  }
  if (access(root.c_str(), W_OK | X_OK) != 0)
    throw UsageError(Message(Field{"save"}, " ", root, ": not writable: ", std::strerror(errno)));
}

// The first checkpoint a run from `first` to o.steps would save that `root` already holds (a
// checkpoint is never written over another), "" for none: refused before the first step, so that
// no training is lost to a save that cannot happen.
std::string first_taken_save(const CheckpointOptions& c, uint64_t first, uint64_t steps) {
  std::vector<uint64_t> taken;
  if (DIR* d = opendir(c.save.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() < 6 || n.compare(0, 5, "step-") != 0 || n.find_first_not_of("0123456789", 5) != std::string::npos ||
          n.size() > 5 + 19)
        continue;
      const uint64_t step = std::stoull(n.substr(5));
      if (checkpoint_name(step) == n && step > first && step <= steps && save_due(c, step, steps)) taken.push_back(step);
    }
    closedir(d);
  }
  if (taken.empty()) return "";
  return checkpoint_name(*std::min_element(taken.begin(), taken.end()));
}

// What a run stopped by a signal kept, for its message.
std::string kept_after_interrupt(const CheckpointOptions& c, const Session& session) {
  std::string s;
  if (!session.saving.empty()) s = "the save of " + session.saving + " was abandoned; ";
  if (!session.log.saved.empty())
    return s + "kept " + session.log.saved.back() + ", the last checkpoint saved (resume with --load " + c.save + ")";
  if (c.save.empty()) return s + "nothing saved (no checkpoint root)";
  const ckpt::StateStore& store = ckpt::state_store();
  const std::string latest = store.latest(c.save);
  if (latest.empty()) return s + "nothing saved; " + c.save + " holds no checkpoint";
  return s + "nothing saved by this run; " + join_path(c.save, std::string(store.latest_file())) + " still names " + latest;
}

// --load of a directory that holds no checkpoint and no `latest`: what it is instead.
void check_loadable(const std::string& load) {
  const ckpt::StateStore& store = ckpt::state_store();
  const std::string index(store.index_file()), latest(store.latest_file());
  if (!fs::exists(load, true)) throw FormatError(load + ": no such file or directory");
  if (!fs::is_directory(load) || fs::exists(join_path(load, index), true) || fs::exists(join_path(load, latest), true))
    return;
  throw FormatError(Message(load, ": no committed checkpoint to resume from (no ", index, ", no `", latest,
                            "`): a run directory holds one only once a save into it has completed (a run stopped "
                            "during its first save leaves none); start the run again without ", Field{"load"},
                            " (with ", Field{"save"}, " ", load, ")"));
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

std::string without_trailing_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// The checkpoint roots to recover: --save, and --load where it names a root (not a checkpoint).
std::vector<std::string> recovery_roots(const CheckpointOptions& c) {
  std::vector<std::string> roots;
  if (!c.save.empty()) roots.push_back(without_trailing_slash(c.save));
  if (!c.load.empty() && !fs::exists(join_path(c.load, std::string(ckpt::state_store().index_file())), true)) {
    const std::string load = without_trailing_slash(c.load);
    if (roots.empty() || roots[0] != load) roots.push_back(load);
  }
  return roots;
}

void save(const train::TrainOptions& o, const CheckpointOptions& c, Session& session, uint64_t steps_done,
          const RankStateAccess& rank, comm::Communicator& comm) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint32_t r = static_cast<uint32_t>(comm.rank());
  const std::string name = checkpoint_name(steps_done), target = join_path(c.save, name);
  if (comm.rank() == 0) {
    spdlog::info("saving {} after step {}", target, steps_done);
    if (c.on_phase) c.on_phase("saving " + target);
  }
  const ckpt::StateStore& store = ckpt::state_store();
  ckpt::StateWriteOptions wo;
  wo.compression = c.compression;
  wo.chunk_bytes = c.chunk_bytes;
  std::string staging;
  if (r == 0) {
    std::unique_ptr<ckpt::StateSave> begun = store.begin_save(target, wo);
    staging = begun->staging();
    std::lock_guard<std::mutex> lock(session.mu);
    session.staging = std::move(begun);
    session.saving = target;
  }
  staging = [&] {
    const auto all = comm.all_gather_bytes(r == 0 ? bytes_of(staging) : std::vector<uint8_t>{});
    return std::string(all.at(0).begin(), all.at(0).end());
  }();

  ckpt::RankManifest manifest;
  {
    const std::unique_ptr<ckpt::StateWriter> w = store.writer(staging, r, wo);
    RankSaveOptions so;
    so.layout = c.layout;
    save_rank_state(*w, rank, so);
    if (c.before_finish) c.before_finish(r, steps_done);
    manifest = w->finish();
  }
  const auto blobs = comm.gather_bytes(ckpt::manifest_to_bytes(manifest), 0);
  if (r == 0) {
    std::vector<ckpt::RankManifest> manifests;
    for (const auto& b : blobs) manifests.push_back(ckpt::manifest_from_bytes(b));
    const train::TrainCursor cursor{o.seed, steps_done, o.micro_batch, o.accumulation, o.dp};
    ckpt::StateSave& save = *session.staging;  // rank 0's own, set by this thread
    save.documents() = state_documents(rank, cursor, c.layout);
    save.commit(std::move(manifests));
    std::lock_guard<std::mutex> lock(session.mu);
    session.staging.reset();
    session.saving.clear();
    session.log.saved.push_back(target);
    const auto removed = store.publish(c.save, name, c.keep);
    session.log.removed.insert(session.log.removed.end(), removed.begin(), removed.end());
  }
  // No rank goes on before the commit: a failure on rank 0 aborts the others here.
  comm.barrier()->wait();
  if (r == 0) {
    std::lock_guard<std::mutex> lock(session.mu);
    session.log.save_seconds.push_back(seconds_since(t0));
  }
}

}  // namespace

std::string checkpoint_name(uint64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08llu", static_cast<unsigned long long>(step));
  return buf;
}

bool save_due(const CheckpointOptions& c, uint64_t steps_done, uint64_t steps) {
  if (c.save.empty()) return false;
  return steps_done == steps || (c.save_every > 0 && steps_done % c.save_every == 0);
}

SavedRun read_saved_run(const std::string& load) {
  SavedRun out;
  CheckpointOptions c;
  c.load = load;
  const ckpt::StateStore& store = ckpt::state_store();
  for (const std::string& root : recovery_roots(c)) {  // recovery may adopt the checkpoint `latest` misses
    auto done = store.recover(root);
    out.recovered.insert(out.recovered.end(), done.begin(), done.end());
  }
  check_loadable(load);
  const auto reader = store.open(load, "resume from it");
  out.dir = reader->dir();
  out.run = run_from_documents(reader->index().documents, out.dir);
  return out;
}

CheckpointedResult run_with_checkpoints(const train::TrainOptions& o, const CheckpointOptions& c,
                                        const std::function<model::ModelSpec()>& spec, const CheckpointedRun& train_run) {
  if (c.save.empty() && c.save_every > 0) throw UsageError(Message(Field{"save_every"}, " needs ", Field{"save"}, " DIR"));
  if (c.save.empty() && c.keep > 0) throw UsageError(Message(Field{"keep"}, " needs ", Field{"save"}, " DIR"));
  if (!c.init.empty() && !c.load.empty())
    throw UsageError(Message(Field{"init"}, " and ", Field{"load"}, " both set the starting state: give one (",
                             Field{"load"}, " resumes a checkpoint, ", Field{"init"},
                             " starts a new run from safetensors weights)"));
  const ckpt::StateStore& store = ckpt::state_store();
  if (!c.init.empty() && fs::is_directory(c.init) &&
      (fs::exists(join_path(c.init, std::string(store.index_file())), true) ||
       fs::exists(join_path(c.init, std::string(store.latest_file())), true)))
    throw UsageError(Message(Field{"init"}, " ", c.init, " is a training checkpoint: resume it with ", Field{"load"}, " ",
                             c.init, " (", Field{"init"}, " starts a new run from safetensors weights; `fpgather convert ",
                             c.init, " OUT.safetensors` exports its weights for one)"));
  std::unique_ptr<train::SafetensorsInit> init;
  if (!c.init.empty()) init = std::make_unique<train::SafetensorsInit>(c.init, spec());
  if (!c.save.empty()) ensure_root(c.save);

  Session session;
  // What killed saves left in the roots this run uses, before `latest` is read or a save begins.
  for (const std::string& root : recovery_roots(c)) {
    auto done = store.recover(root);
    session.log.recovered.insert(session.log.recovered.end(), done.begin(), done.end());
  }
  std::unique_ptr<ckpt::StateReader> reader;
  train::TrainCursor loaded;
  double open_seconds = 0, slowest_rank_load = 0;
  if (!c.load.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    check_loadable(c.load);
    spdlog::info("loading {}", c.load);
    reader = store.open(c.load, "resume from it");  // resolves `latest`
    open_seconds = seconds_since(t0);
    loaded = saved_cursor(reader->index().documents, reader->dir());
    session.log.loaded = reader->dir();
    session.log.loaded_step = loaded.next_step;
    spdlog::info("loaded {}: validated in {:.3f} s, resuming at step {}", reader->dir(), open_seconds, loaded.next_step);
  }
  if (!c.save.empty()) {
    const std::string taken = first_taken_save(c, loaded.next_step, o.steps);
    if (!taken.empty())
      throw UsageError(Message(Field{"save"}, " ", c.save, ": ", join_path(c.save, taken),
                               " already exists, and this run would save it (a checkpoint is never written over "
                               "another); resume from it with ", Field{"load"}, " ", c.save, ", or give another ",
                               Field{"save"}, " DIR"));
  }

  CheckpointHooks hooks;
  if (init) hooks.init = [&](uint32_t p, float* out) { init->fill(p, out); };
  if (reader)
    hooks.resume = [&](RankStateAccess& rank, comm::Communicator& comm) {
      const train::TrainCursor run{o.seed, 0, o.micro_batch, o.accumulation, o.dp};
      check_resumable(reader->index().documents, state_documents(rank, run, c.layout), reader->dir());
      const auto t0 = std::chrono::steady_clock::now();
      if (comm.rank() == 0 && c.on_phase) c.on_phase("loading " + reader->dir());
      load_rank_state(*reader, rank, comm);
      const double s = seconds_since(t0);
      if (comm.rank() == 0 && c.on_phase && loaded.next_step < o.steps)
        c.on_phase("step " + std::to_string(loaded.next_step + 1) + " of " + std::to_string(o.steps));
      std::lock_guard<std::mutex> lock(session.mu);
      slowest_rank_load = std::max(slowest_rank_load, s);
      return loaded.next_step;
    };
  if (!c.save.empty())
    hooks.after_step = [&](uint64_t done, const RankStateAccess& rank, comm::Communicator& comm) {
      if (save_due(c, done, o.steps)) save(o, c, session, done, rank, comm);
    };

  CheckpointedResult out;
  try {
    out.train = run_interruptible([&] { return train_run(hooks); },
                                  [&] { return kept_after_interrupt(c, session); });
  } catch (...) {
    // Every rank thread has ended: nothing writes into the staging directory any more, which the
    // uncommitted save removes.
    session.staging.reset();
    throw;
  }
  out.checkpoints = std::move(session.log);
  if (reader) {
    out.checkpoints.load_seconds = open_seconds + slowest_rank_load;
    out.checkpoints.loaded_chunks = reader->chunks_read();
    out.checkpoints.loaded_bytes = reader->stored_bytes_read();
  }
  return out;
}

CheckpointedResult train_with_checkpoints(const train::TrainOptions& o, const CheckpointOptions& c,
                                          const train::RankObserver& observer, const train::StepCallback& on_step) {
  return run_with_checkpoints(o, c, [&] { return train::training_spec(o); }, [&](const CheckpointHooks& h) {
    train::TrainHooks hooks;
    hooks.init = h.init;
    if (h.resume)
      hooks.resume = [&](pipeline::RankPipeline& rank, comm::Communicator& comm) {
        PipelineAccess access(rank);
        return h.resume(access, comm);
      };
    if (h.after_step)
      hooks.after_step = [&](uint64_t done, const pipeline::RankPipeline& rank, comm::Communicator& comm) {
        h.after_step(done, PipelineAccess(rank), comm);
      };
    return train::train(o, observer, on_step, hooks);
  });
}

}  // namespace fpg::app::checkpoint
