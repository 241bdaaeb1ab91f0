// Shared pieces of the fpgather command line: global options and subcommand registration.
// cmd/ only parses and prints; the work lives in libfpgather.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace fpg::cli {

struct GlobalOptions {
  std::string log_level;  // empty: FPGATHER_LOG, else warn
  bool json = false;      // machine-readable results on stdout
  size_t threads = 0;     // 0: one per hardware thread
  bool no_progress = false;
  int verbose = 0;        // -v: info, -vv: debug, -vvv: trace
  bool quiet = false;     // -q: errors only, no progress bar
};

// The log level the options ask for ("" for FPGATHER_LOG or the default); -q and -v refine
// --log-level's default and are refused with it or with each other (UsageError).
std::string log_level_of(const GlobalOptions& global);

// Each subcommand file defines one of these; main.cpp calls them all. The callback that a
// subcommand sets returns its exit code through `run`.
using Runner = std::function<int()>;
void register_convert(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_inspect(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_bench(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_validate(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_diff(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_reshard(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_train(CLI::App& app, const GlobalOptions& global, Runner& run);
void register_step(CLI::App& app, const GlobalOptions& global, Runner& run);
// `fpgather completion bash|zsh`: the shell's completion script, generated from `app` (completion.cpp).
void register_completion(CLI::App& app, Runner& run);
// `fpgather help [CMD...]`: what `fpgather [CMD...] --help` prints (command_line.cpp).
void register_help(CLI::App& app, Runner& run);

// After every subcommand is registered (command_line.cpp): subcommands fall through to the global
// options, help shows defaults as they are, and parse errors are printed as "fpgather: …" lines.
void set_conventions(CLI::App& app);
// The message for a mistyped subcommand or long option in `args` (argv without the program name), with
// the nearest known name when one is close: "'inpsect' is not a command; did you mean 'inspect'?".
std::optional<std::string> check_names(const CLI::App& app, const std::vector<std::string>& args);

// The values an option (or positional) takes, where they are a fixed set: shell completion offers
// them instead of file names (completion.cpp). Returns `o`.
CLI::Option* with_values(CLI::Option* o, std::vector<std::string> values);
// Those values; nullptr for an option without a fixed set.
const std::vector<std::string>* option_values(const CLI::Option* o);

// True when progress bars may be drawn: stderr is a terminal and --no-progress was not given.
bool progress_enabled(const GlobalOptions& global);

// The library names an option by its field ("dist_opt must be …"); a command reports it by its flag.
using FlagNames = std::vector<std::pair<std::string, std::string>>;  // field, flag
// The message of `e` with each field it records naming (core/error.h, Message) said as its flag: the
// one `flags` gives, else "--" and the field with '-' for '_' ("save_every" -> "--save-every").
std::string flag_message(const Error& e, const FlagNames& flags = {});
// Runs `body`, rethrowing a UsageError with its recorded fields said as flag_message says and each
// field of `flags` that its message names as a word replaced by the flag ("--dist-opt must be …").
int with_flag_names(const FlagNames& flags, const std::function<int()>& body);

}  // namespace fpg::cli
