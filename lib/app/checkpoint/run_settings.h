// The configuration of a training run as `fpgather train` spells it: one setting per option, its
// value as the command line takes it. A checkpoint's run (run_from_documents) is shown this way by
// `inspect` and taken over by `train --load`, which lists every option given on its command line
// that would change what a resumed run must keep (resume_conflicts), all at once.
//
// What a resumed run may change: the hyperparameters that scale the update (--lr, --weight-decay,
// --clip-grad; the state's meaning does not depend on them) and everything not stored (steps,
// logging, saving, device, communicator, threads). Everything else is the run's: the model and its
// fp32-kept params, the DP size and layout (reshard changes those, offline), the optimizer and its
// other hyperparameters, the FP8 recipe, and the data stream (seed, micro-batch, accumulation).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/train/trainer.h"

namespace fpg::app::checkpoint {

struct RunSetting {
  std::string option;              // "--lr", "--nesterov" (a switch: value "yes" or "no")
  std::string value;               // "0.001", "bucketed", "^(a|b)$", "none"
  std::vector<std::string> words;  // the command-line words that give it: {"--lr", "0.001"}, {"--no-nesterov"}, {}
  nlohmann::json json;             // the value typed: 0.001, true, [0.9, 0.999], null for "none"
  bool may_change = false;         // a resumed run may give another value
  // What two runs are compared by, where the value alone does not say it (the model: its spec).
  std::string compared;
};

// The settings of `o` that a checkpoint records, in one fixed order; options that do not apply
// to the run (--momentum without muon, --mx-scale without mxfp8) are left out. Numbers are written so
// that they read back as the same double. --model is the spec's name (the spec itself comes from the
// checkpoint on resume); --keep-fp32 and --fp32-matrices are anchored regexes of the params that the
// spec marks fp32-kept, with o.keep_fp32 and o.fp32_matrices applied (typed: the list of names).
std::vector<RunSetting> run_settings(const train::TrainOptions& o);

// {"model": "tiny", "lr": 0.001, "betas": [0.9, 0.999], "bucket_size": null, …}: each setting by
// its option's name (dashes as underscores), its value typed.
nlohmann::json settings_json(const std::vector<RunSetting>& settings);

// "--model tiny --dp 2 --optimizer adamw …": the words of every setting, shell-quoted where needed.
std::string settings_command_line(const std::vector<RunSetting>& settings);

struct SettingConflict {
  std::string option;
  std::string saved, run;  // the values; "no value (…)" where the setting does not apply to that run
};

// The settings a resumed run must keep that `run` changes from `saved`, in run_settings order: those
// of the options `given` on the command line; a setting that follows from them (--eps, once
// --optimizer changes) is not listed. Where no given option differs but the runs still do (a --model
// spec without the checkpoint's fp32-kept params), each differing setting is listed.
std::vector<SettingConflict> resume_conflicts(const train::TrainOptions& saved, const train::TrainOptions& run,
                                              const std::function<bool(const std::string& option)>& given);

// The message listing every conflict (one line each) for a resume from `dir`; where the DP size or
// the layout differs it names the reshard that rewrites the checkpoint for this run.
std::string conflicts_message(const std::string& dir, const train::TrainOptions& saved, const train::TrainOptions& run,
                              const std::vector<SettingConflict>& conflicts);

}  // namespace fpg::app::checkpoint
