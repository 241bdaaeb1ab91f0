#include "formats/fpckpt/recovery.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/staging.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/validate.h"

namespace fpg::fpckpt {
namespace {

struct Entry {
  std::string name;
  struct stat st {};
};

std::vector<Entry> list_dir(const std::string& dir) {
  std::vector<Entry> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    Entry x{e->d_name, {}};
    if (x.name == "." || x.name == "..") continue;
    if (lstat(fs::join_path(dir, x.name).c_str(), &x.st) == 0) out.push_back(std::move(x));
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

bool all_of_class(const std::string& s, size_t from, size_t to, int (*cls)(int)) {
  if (from >= to || to > s.size()) return false;
  for (size_t i = from; i < to; ++i)
    if (!cls(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "step-" and digits: a checkpoint of `fpgather train`.
bool step_name(const std::string& n) {
  return n.rfind("step-", 0) == 0 && n.size() <= 5 + 19 && all_of_class(n, 5, n.size(), isdigit);
}
uint64_t step_of(const std::string& n) { return std::stoull(n.substr(5)); }

// "rank-" and digits ".h5": a data file (rank_writer.h).
bool data_file_name(const std::string& n) {
  return n.rfind("rank-", 0) == 0 && ends_with(n, ".h5") && all_of_class(n, 5, n.size() - 3, isdigit);
}

bool our_directory(const struct stat& st) { return S_ISDIR(st.st_mode) && st.st_uid == geteuid(); }

bool has_index(const std::string& dir) { return fs::exists(fs::join_path(dir, kIndexFile)); }

// The first problem that validation's index checks find, or "".
std::string first_problem(const std::string& dir) {
  try {
    const CheckpointReader reader(dir, ChunkReads::direct, IndexCheck::report);
    const ValidateReport rep = validate_index(reader);
    if (rep.problems.empty()) return "";
    return ckpt::to_string(rep.problems.front()) +
           (rep.problems.size() > 1 ? " (and " + std::to_string(rep.problems.size() - 1) + " more)" : "");
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

std::vector<std::string> recover_root(const std::string& root) {
  std::vector<std::string> actions;
  auto act = [&](std::string line) {
    spdlog::warn("{}", line);
    actions.push_back(std::move(line));
  };
  if (!fs::is_directory(root)) return actions;
  bool changed = false;

  for (const Entry& e : list_dir(root)) {
    const std::string path = fs::join_path(root, e.name);
    const std::string staged = fs::staging_target(e.name, S_ISDIR(e.st.st_mode));
    if (!staged.empty()) {
      if (!fs::remove_if_stale_staging(path)) continue;
      if (S_ISDIR(e.st.st_mode)) act(root + ": removed " + e.name + ", the staging directory of a save that did not finish");
      else if (staged == kLatestFile) act(root + ": removed " + e.name + ", a `latest` whose write did not finish");
      else act(root + ": removed " + e.name + ", a file whose write did not finish");
      changed = true;
      continue;
    }
    if (!our_directory(e.st)) continue;
    if (e.name[0] == '.' && ends_with(e.name, kDeletingSuffix)) {
      fs::remove_tree(path);
      act(root + ": finished deleting " + e.name + " (a retention cut short)");
      changed = true;
    } else if (step_name(e.name) && !has_index(path)) {
      const auto files = list_dir(path);
      const bool data_only = std::all_of(files.begin(), files.end(), [](const Entry& f) {
        return S_ISREG(f.st.st_mode) && data_file_name(f.name);
      });
      if (!data_only) continue;
      fs::remove_tree(path);
      act(root + ": removed " + e.name + ", a checkpoint left without index.h5 by a deletion cut short");
      changed = true;
    }
  }

  // Newer committed checkpoints than `latest` names, newest first.
  const std::string latest = latest_name(root);
  if (!latest.empty() && !step_name(latest)) {
    if (changed) fs::fsync_directory(root);
    return actions;  // named by hand: nothing to compare with
  }
  std::vector<std::string> newer;
  for (const Entry& e : list_dir(root))
    if (S_ISDIR(e.st.st_mode) && step_name(e.name) && has_index(fs::join_path(root, e.name)) &&
        (latest.empty() || step_of(e.name) > step_of(latest)))
      newer.push_back(e.name);
  std::sort(newer.begin(), newer.end(), [](const std::string& a, const std::string& b) { return step_of(a) > step_of(b); });
  for (const std::string& name : newer) {
    const std::string problem = first_problem(fs::join_path(root, name));
    if (problem.empty()) {
      update_latest(root, name);
      act(root + ": adopted " + name + " as latest: it was committed but `latest` named " +
          (latest.empty() ? std::string("nothing") : latest) + " (a save cut short before updating `latest`)");
      break;
    }
    std::string aside = "." + name + kInvalidSuffix;
    for (int i = 2; fs::exists(fs::join_path(root, aside)); ++i)
      aside = "." + name + kInvalidSuffix + "-" + std::to_string(i);
    if (rename(fs::join_path(root, name).c_str(), fs::join_path(root, aside).c_str()) != 0) continue;  // another did it
    act(root + ": set " + name + " aside as " + aside + ": it is newer than `latest` but not valid: " + problem);
    changed = true;
  }
  if (changed) fs::fsync_directory(root);
  return actions;
}

}  // namespace fpg::fpckpt
