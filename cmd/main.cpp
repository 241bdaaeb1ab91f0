// fpgather: entry point. Parses the global options, dispatches to a subcommand and maps errors to
// the documented exit codes (0 ok, 1 check failed, 2 usage, 3 input/output or format, 4 internal).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "option_range.h"
#include "core/build_info.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/thread_pool.h"

namespace fpg::cli {

bool progress_enabled(const GlobalOptions& global) { return !global.no_progress && progress_terminal(); }

namespace {

// `fpgather --version`: the version, then what this build holds, one "name: version" a line.
std::string version_text() {
  std::string text = std::string("fpgather ") + FPGATHER_VERSION + " (" + build_compiler() + ")";
  auto line = [&text](const std::string& name, const std::string& version) {
    text += "\n" + name + ":" + std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') +
            (version.empty() ? "not built" : version);
  };
  for (const auto& c : build_components()) line(c.name, c.version);
  line("CLI11", CLI11_VERSION);
  return text;
}

// Whether --json comes before the end of the options: parse errors are reported as JSON too.
bool json_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") return false;
    if (std::string(argv[i]) == "--json") return true;
  }
  return false;
}

// An error as the user sees it: "fpgather: MESSAGE" on stderr, or with --json one JSON document
// {"error": MESSAGE, "exit_code": CODE, "signal": NAME or null} (man/json/error.schema.json).
// `kind` ("error: ", "internal error: ") leads the text line only: JSON says it by the exit code.
int report(bool json, int code, const std::string& message, const std::string& signal = "", const char* kind = "") {
  if (json) {
    const nlohmann::json j = {{"error", message}, {"exit_code", code},
                              {"signal", signal.empty() ? nlohmann::json() : nlohmann::json(signal)}};
    const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fprintf(stderr, "%s\n", text.c_str());
  } else {
    std::fprintf(stderr, "fpgather: %s%s\n", kind, message.c_str());
  }
  return code;
}

}  // namespace
}  // namespace fpg::cli

int main(int argc, char** argv) {
  using namespace fpg;
  // A write past the file size limit (ulimit -f) then fails with EFBIG, which the save reports and
  // cleans up after, instead of killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fpgather: the data-parallel optimizer pipeline of large-model training, FP8 "
               "quantization, and the checkpoint tools around them.",
               "fpgather"};
  app.set_version_flag("-V,--version", cli::version_text, "Print the version and the build's features and libraries");
  app.require_subcommand(1);
  cli::GlobalOptions global;
  cli::with_values(app.add_option("--log-level", global.log_level,
                                  "trace, debug, info, warn (default), error or off; also env FPGATHER_LOG"),
                   {"trace", "debug", "info", "warn", "error", "off"});
  app.add_flag("-v,--verbose", global.verbose,
               "More detail on stderr: -v info (the phases of the work), -vv debug (also each file opened, each staging "
               "directory and commit), -vvv trace");
  app.add_flag("-q,--quiet", global.quiet, "Only errors on stderr: no warnings, no progress bar");
  app.add_flag("--json", global.json, "Print results as JSON on stdout");
  // More threads than this only contend, and each counts against the system's process limit.
  cli::integer_range(app.add_option("--threads", global.threads,
                                    "Worker threads, at most 1024 or 4 per hardware thread, whichever is more "
                                    "(default: one per hardware thread)"),
                     0, fpg::max_threads());
  app.add_flag("--no-progress", global.no_progress, "Never draw progress bars (drawn only when stderr is a terminal)");

  cli::Runner run;
  cli::register_train(app, global, run);
  cli::register_step(app, global, run);
  cli::register_convert(app, global, run);
  cli::register_inspect(app, global, run);
  cli::register_bench(app, global, run);
  cli::register_validate(app, global, run);
  cli::register_diff(app, global, run);
  cli::register_reshard(app, global, run);
  cli::register_completion(app, run);
  cli::register_help(app, run);
  cli::set_conventions(app);

  const bool json = cli::json_requested(argc, argv);
  const int usage = static_cast<int>(ExitCode::usage);
  if (const auto wrong = cli::check_names(app, std::vector<std::string>(argv + 1, argv + argc)))
    return cli::report(json, usage, *wrong);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0 || !json) {
      const int code = app.exit(e);  // prints help, version or the parse error
      return code == 0 ? 0 : usage;
    }
    std::ostringstream out, err;
    app.exit(e, out, err);  // the message as the failure_message (command_line.cpp) words it
    std::string message = err.str();
    while (!message.empty() && message.back() == '\n') message.pop_back();
    if (message.rfind("fpgather: ", 0) == 0) message.erase(0, 10);
    return cli::report(true, usage, message);
  }
  try {
    init_logging(cli::log_level_of(global));
    if (global.quiet) global.no_progress = true;
    ThreadPool::set_global_threads(global.threads);
    const int code = run ? run() : usage;
    if (const int sig = interrupt_signal())  // it came after the last safe point: the work is complete
      return cli::report(json, static_cast<int>(interrupted_exit_code(sig)),
                         "interrupted (" + signal_name(sig) + ") after the work was complete; its results are above",
                         signal_name(sig));
    return code;
  } catch (const Interrupted& e) {
    return cli::report(json, static_cast<int>(e.code()),
                       "interrupted (" + signal_name(e.signal()) + "): " + e.what(), signal_name(e.signal()));
  } catch (const Error& e) {
    const std::string message = cli::flag_message(e);
    if (const int sig = interrupt_signal())
      return cli::report(json, static_cast<int>(interrupted_exit_code(sig)),
                         "interrupted (" + signal_name(sig) + "): " + message, signal_name(sig));
    return cli::report(json, static_cast<int>(e.code()), message, "", "error: ");
  } catch (const std::exception& e) {
    return cli::report(json, static_cast<int>(ExitCode::internal), e.what(), "", "internal error: ");
  }
}
