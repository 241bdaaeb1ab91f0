// The conventions of the fpgather command line, as git and cargo have them: global options before or
// after the subcommand, "did you mean" for mistyped subcommands and options, every error line led by
// "fpgather:", and help that shows defaults as they are.
#include <algorithm>
#include <cctype>

#include <map>

#include "cli.h"
#include "core/error.h"
#include "core/suggest.h"

namespace fpg::cli {
namespace {

// "fpgather bench quantize": the words that reach `app`.
std::string command_path(const CLI::App* app) {
  std::string path = app->get_name();
  for (const CLI::App* p = app->get_parent(); p != nullptr; p = p->get_parent()) path = p->get_name() + " " + path;
  return path;
}

std::vector<const CLI::App*> subcommands_of(const CLI::App* app) {
  return app->get_subcommands([](const CLI::App*) { return true; });
}

// The option `name` ("--steps", "-h") of `app` or of a parent that the app falls through to.
const CLI::Option* find_option(const CLI::App* app, const std::string& name) {
  for (const CLI::App* a = app; a != nullptr; a = a->get_fallthrough() ? a->get_parent() : nullptr)
    for (const CLI::Option* o : a->get_options())
      if (o->nonpositional() && o->check_name(name)) return o;
  return nullptr;
}

std::vector<std::string> long_option_names(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* a = app; a != nullptr; a = a->get_fallthrough() ? a->get_parent() : nullptr)
    for (const CLI::Option* o : a->get_options())
      for (const auto& n : o->get_lnames()) names.push_back("--" + n);
  return names;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& known, const std::string& help) {
  const auto near = closest_name(word, known);
  return near ? "; did you mean '" + *near + "'?" : "; see '" + help + " --help'";
}

// Help that tells the truth about flags: "--nesterov, --no-nesterov", not "--no-nesterov{false}" (the
// value a negated spelling stores is no default).
class Formatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, positional);
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
      const size_t close = name.find('}', open);
      if (close == std::string::npos) break;
      name.erase(open, close - open + 1);
    }
    return name;
  }
};

std::string lowercase_first(std::string s) {
  // "The following argument …" reads as the rest of our line; "IN is required" keeps its name.
  if (s.size() > 1 && std::isupper(static_cast<unsigned char>(s[0])) && (std::islower(static_cast<unsigned char>(s[1])) || s[1] == ' '))
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

// The innermost subcommand that parsing reached.
const CLI::App* parsed_leaf(const CLI::App* app) {
  for (;;) {
    const auto parsed = app->get_subcommands();
    if (parsed.empty()) return app;
    app = parsed.back();
  }
}

void set_conventions_below(CLI::App* app, const std::string& global_names) {
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
    sub->formatter(app->get_formatter());
    sub->fallthrough();  // an option the subcommand lacks is looked up in its parents: the global ones
    sub->footer("Global options (" + global_names + ") may also come after the subcommand; see 'fpgather --help'.");
    set_conventions_below(sub, global_names);
  }
}

}  // namespace

void set_conventions(CLI::App& app) {
  app.formatter(std::make_shared<Formatter>());
  std::string global_names;
  for (const CLI::Option* o : app.get_options())
    if (o != app.get_help_ptr() && o->nonpositional() && !o->get_lnames().empty() && o->get_lnames()[0] != "version")
      global_names += (global_names.empty() ? "--" : ", --") + o->get_lnames()[0];
  set_conventions_below(&app, global_names);
  app.failure_message([](const CLI::App* root, const CLI::Error& e) {
    const CLI::App* leaf = parsed_leaf(root);
    const std::string where = leaf == root ? "" : command_path(leaf).substr(root->get_name().size() + 1) + ": ";
    std::string what = e.what();
    // CLI11 puts a range check's message (option_range.h) after "--steps: "; it reads as the run's
    // own checks do: "--steps must be an integer from 1 to …".
    const size_t at = what.find(": must be ");
    if (what.compare(0, 2, "--") == 0 && at != std::string::npos && at < what.find(' ')) what.erase(at, 1);
    return root->get_name() + ": " + where + lowercase_first(what) + " (see '" + command_path(leaf) +
           " --help')\n";
  });
}

std::optional<std::string> check_names(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* cur = &app;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") break;  // the rest are positional arguments
    if (word.size() > 1 && word[0] == '-') {
      const std::string name = word.substr(0, word.find('='));
      const CLI::Option* opt = find_option(cur, name);
      if (opt == nullptr && name.size() > 2 && name[1] == '-') {
        const std::string where = cur == &app ? "" : command_path(cur).substr(app.get_name().size() + 1) + ": ";
        return where + "unknown option '" + name + "'" + did_you_mean(name, long_option_names(cur), command_path(cur));
      }
      if (opt != nullptr && opt->get_expected_max() > 0 && name.size() == word.size()) ++i;  // its value
      continue;
    }
    const auto subs = subcommands_of(cur);
    if (subs.empty()) continue;  // a positional argument of the subcommand
    const auto match = std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(word); });
    if (match != subs.end()) {
      cur = *match;
      continue;
    }
    if (!cur->get_options([](const CLI::Option* o) { return o->get_positional(); }).empty()) break;
    std::vector<std::string> names;
    for (const CLI::App* s : subs) names.push_back(s->get_name());
    const std::string kind = cur == &app ? "" : command_path(cur).substr(app.get_name().size() + 1) + " ";
    return "'" + word + "' is not a " + kind + "command" + did_you_mean(word, names, command_path(cur));
  }
  return std::nullopt;
}

namespace {
std::map<const CLI::Option*, std::vector<std::string>>& value_table() {
  static std::map<const CLI::Option*, std::vector<std::string>> table;
  return table;
}
}  // namespace

void register_help(CLI::App& app, Runner& run) {
  auto names = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("help", "Print the help of fpgather or of a subcommand: fpgather help CMD is "
                                         "fpgather CMD --help");
  std::vector<std::string> subs;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) subs.push_back(s->get_name());
  with_values(cmd->add_option("CMD", *names, "The subcommand (and a subcommand of it: help bench quantize)"), subs);
  cmd->callback([names, &app, &run] {
    run = [names, &app] {
      const CLI::App* target = &app;
      std::string prefix;
      for (const std::string& n : *names) {
        const CLI::App* next = nullptr;
        for (const CLI::App* s : target->get_subcommands([](const CLI::App*) { return true; }))
          if (s->get_name() == n) next = s;
        if (!next) throw UsageError("help: '" + n + "' is not a command" + (prefix.empty() ? "" : " of '" + prefix + "'"));
        prefix += (prefix.empty() ? "" : " ") + target->get_name();
        target = next;
      }
      // The formatter itself: App::help() would describe the selected subcommand, this one.
      const std::string name = (prefix.empty() ? "" : prefix + " ") + target->get_name();
      std::fputs(target->get_formatter()->make_help(target, name, CLI::AppFormatMode::Normal).c_str(), stdout);
      return 0;
    };
  });
}

std::string log_level_of(const GlobalOptions& g) {
  if (g.quiet && g.verbose) throw UsageError("-q (--quiet) and -v (--verbose) contradict each other");
  if ((g.quiet || g.verbose) && !g.log_level.empty())
    throw UsageError(std::string(g.quiet ? "-q (--quiet)" : "-v (--verbose)") + " and --log-level both set the log level: give one");
  if (g.quiet) return "error";
  if (g.verbose == 1) return "info";
  if (g.verbose == 2) return "debug";
  if (g.verbose > 2) return "trace";
  return g.log_level;
}

CLI::Option* with_values(CLI::Option* o, std::vector<std::string> values) {
  value_table()[o] = std::move(values);
  return o;
}

const std::vector<std::string>* option_values(const CLI::Option* o) {
  const auto it = value_table().find(o);
  return it == value_table().end() ? nullptr : &it->second;
}

}  // namespace fpg::cli
