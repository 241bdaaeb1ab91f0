#include "app/inspect/inspect.h"

#include <fmt/format.h>

#include "app/checkpoint/run_settings.h"
#include "app/checkpoint/state_documents.h"
#include "ckpt/documents.h"
#include "ckpt/format_registry.h"
#include "ckpt/state_store.h"
#include "core/error.h"
#include "core/progress.h"

namespace fpg::app::inspect {
namespace {

// A training checkpoint's run as `train` options (what `train --load` takes from it): a line of the
// text before "documents", and "training" of the JSON (null for a checkpoint that records no run).
void add_training(ckpt::CheckpointSummary& s) {
  s.document["training"] = nullptr;
  const std::unique_ptr<ckpt::StateReader> r = ckpt::state_store().open_as_is(s.path);
  const ckpt::Documents& docs = r->index().documents;
  if (!docs.get(ckpt::doc::data) || !docs.get(ckpt::doc::optimizer)) return;
  train::TrainOptions run;
  try {
    run = checkpoint::run_from_documents(docs, r->dir());
  } catch (const FormatError& e) {
    s.warnings.push_back(std::string("the run it records cannot be read: ") + e.what());
    return;
  }
  const auto settings = checkpoint::run_settings(run);
  const std::string line = checkpoint::settings_command_line(settings);
  s.document["training"] = {{"next_step", run.steps}, {"settings", checkpoint::settings_json(settings)},
                            {"options", line}};
  auto at = s.text.begin();
  while (at != s.text.end() && at->rfind("documents", 0) != 0) ++at;
  at = s.text.insert(at, fmt::format("{:<12} {}", "next step", run.steps));
  s.text.insert(at + 1, fmt::format("{:<12} {}", "run", line));
}

}  // namespace

std::unique_ptr<ckpt::Checkpoint> open(const std::string& path) { return ckpt::open_checkpoint(path); }

// A large index (a Megatron checkpoint of a million chunks) takes seconds to read.
std::unique_ptr<ckpt::Checkpoint> open_showing(const std::string& path, const char* label, bool progress) {
  Progress p(label, 0, progress);
  p.phase("reading the index of " + path);
  return open(path);
}

ckpt::CheckpointSummary inspect(const std::string& path, const ckpt::SummaryOptions& options) {
  ckpt::CheckpointSummary s = open_showing(path, "inspect", options.progress)->summary(options);
  // A run's own checkpoint (the state store's) records the run: `train --load` takes it from there.
  const ckpt::Format* f = ckpt::builtin_formats().probe(s.path);
  if (f && f->contents() == ckpt::Contents::training_state) add_training(s);
  return s;
}

ckpt::KeyReport inspect_key(const std::string& path, const std::string& key) { return open(path)->key(key); }

}  // namespace fpg::app::inspect
