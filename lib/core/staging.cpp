#include "core/staging.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>

#include "core/fs.h"
#include "core/log.h"

namespace fpg::fs {
namespace {

bool all_of_class(const std::string& s, size_t from, int (*cls)(int), size_t length) {
  if (from >= s.size() || (length && s.size() - from != length)) return false;
  for (size_t i = from; i < s.size(); ++i)
    if (!cls(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// The target of ".NAME<marker><tail>" whose tail is all of `cls` (and `length` long, unless 0), ""
// otherwise.
std::string target_before(const std::string& name, const std::string& marker, int (*cls)(int), size_t length) {
  const size_t at = name.rfind(marker);
  if (at == std::string::npos || at < 2 || !all_of_class(name, at + marker.size(), cls, length)) return "";
  return name.substr(1, at - 1);
}

}  // namespace

std::string staging_target(const std::string& name, bool directory) {
  if (name.size() < 2 || name[0] != '.') return "";
  if (!directory) return target_before(name, ".tmp-", isdigit, 0);
  std::string t = target_before(name, ".tmp-", isxdigit, 16);
  if (t.empty()) t = target_before(name, ".fpgather-staging-", isalnum, 6);
  return t;
}

bool lock_staging(int fd) noexcept { return fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0; }

bool remove_if_stale_staging(const std::string& path) noexcept {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || st.st_uid != ::geteuid()) return false;
  const bool dir = S_ISDIR(st.st_mode);
  if (!dir && !S_ISREG(st.st_mode)) return false;
  if (std::time(nullptr) - st.st_mtime < kStagingGraceSeconds) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return false;
  struct stat opened {};
  bool removed = false;
  if (::fstat(fd, &opened) == 0 && opened.st_ino == st.st_ino && opened.st_dev == st.st_dev && lock_staging(fd)) {
    if (dir) remove_tree(path);
    else ::unlink(path.c_str());
    removed = !exists(path);
  }
  ::close(fd);  // releases the lock
  return removed;
}

std::vector<std::string> remove_stale_staging_beside(const std::string& target) noexcept {
  std::vector<std::string> removed;
  try {
    std::string t = target;
    while (t.size() > 1 && t.back() == '/') t.pop_back();
    const auto [dir, name] = split_path(t);
    if (name.empty()) return removed;
    std::vector<std::string> candidates;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        struct stat st {};
        if (n.size() <= name.size() + 1 || n.compare(1, name.size(), name) != 0 ||
            ::lstat(join_path(dir, n).c_str(), &st) != 0)
          continue;
        if (staging_target(n, S_ISDIR(st.st_mode)) == name) candidates.push_back(n);
      }
      ::closedir(d);
    }
    std::sort(candidates.begin(), candidates.end());
    for (const std::string& n : candidates) {
      if (!remove_if_stale_staging(join_path(dir, n))) continue;
      spdlog::warn("removed {}, staging of {} left by a run that did not finish", join_path(dir, n), t);
      removed.push_back(n);
    }
  } catch (...) {
    // Best effort: a directory that cannot be listed keeps what it holds.
  }
  return removed;
}

}  // namespace fpg::fs
