#include "app/convert/staged_output.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/printable.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/staging.h"
#include "core/tensor_file.h"

namespace fpg::app::convert {
namespace {

namespace stdfs = std::filesystem;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip_trailing_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// Absolute and lexically normal, without a trailing separator.
stdfs::path absolute_path(const std::string& p) {
  stdfs::path a = stdfs::absolute(stdfs::path(p)).lexically_normal();
  if (a.filename().empty() && a.has_parent_path() && a != a.root_path()) a = a.parent_path();
  return a;
}

stdfs::path canonical_or_absolute(const std::string& p) {
  std::error_code ec;
  const stdfs::path c = stdfs::weakly_canonical(stdfs::path(p), ec);
  return ec ? absolute_path(p) : c;
}

// Whether `p` is `dir` or lies below it (component-wise).
bool inside(const stdfs::path& p, const stdfs::path& dir) {
  auto a = p.begin(), b = dir.begin();
  for (; b != dir.end(); ++a, ++b) {
    if (b->empty()) continue;  // a trailing separator
    if (a == p.end() || *a != *b) return false;
  }
  return true;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw FormatError("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
}

// Exchanges two directories atomically where the kernel and file system can; false otherwise.
bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(RENAME_EXCHANGE)
  return ::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

}  // namespace

OutputKind output_kind(const std::string& out) {
  if (ends_with(out, ".safetensors")) return OutputKind::file;
  if (ends_with(out, ".json")) return OutputKind::index;
  return OutputKind::directory;
}

StagedOutput::StagedOutput(const std::string& out, OutputKind kind, bool force, const std::vector<std::string>& inputs)
    : kind_(kind), force_(force) {
  if (out.empty()) throw UsageError("OUT is empty");
  display_out_ = strip_trailing_slashes(out);
  const stdfs::path abs = absolute_path(out);
  out_ = abs.string();
  for (const auto& in : inputs) inputs_.push_back(canonical_or_absolute(in).string());
  const bool present = fs::exists(out_, true), is_dir = fs::is_directory(out_);
  const stdfs::path canonical_out = canonical_or_absolute(out_);
  auto is_input = [&](const stdfs::path& p) {
    for (const auto& in : inputs_)
      if (stdfs::path(in) == p) return true;
    return false;
  };

  if (kind_ == OutputKind::directory) {
    final_dir_ = out_;
    display_dir_ = display_out_;
    if (present && !is_dir)
      throw UsageError("OUT " + display_out_ + " is a file where a directory is needed (a path ending in "
                       ".safetensors names one file, one ending in .json an index)");
    const std::vector<std::string> entries = present ? list_dir(out_) : std::vector<std::string>{};
    if (!entries.empty()) {
      if (!force_)
        throw UsageError(Message("OUT ", display_out_, " exists and holds ", std::to_string(entries.size()),
                                 " file(s): give ", Field{"force"}, " to replace it"));
      for (const auto& e : entries)
        if (fs::is_directory(out_ + "/" + e))
          throw UsageError(Message("OUT ", display_out_, " holds the directory '", e, "': ", Field{"force"},
                                   " replaces only a directory of files, as convert writes; remove it yourself"));
      for (const auto& in : inputs_)
        if (inside(stdfs::path(in), canonical_out))
          throw UsageError("OUT " + display_out_ + " holds the input " + in + ": choose another OUT");
      std::error_code ec;
      const stdfs::path cwd = stdfs::current_path(ec);
      if (!ec && inside(cwd, canonical_out))
        throw UsageError("OUT " + display_out_ + " is the working directory or holds it: choose another OUT");
    }
  } else {
    final_dir_ = abs.parent_path().string();
    const std::string parent = stdfs::path(display_out_).parent_path().string();
    display_dir_ = parent.empty() ? "." : parent;
    const char* what = kind_ == OutputKind::file ? "a .safetensors file" : "an index .json";
    if (present && is_dir) throw UsageError("OUT " + display_out_ + " is a directory where " + what + " is needed");
    if (present && is_input(canonical_out))
      throw UsageError("OUT " + display_out_ + " is the input file " + canonical_out.string() + ": choose another OUT");
    if (present && !force_) throw UsageError(Message("OUT ", display_out_, " exists: give ", Field{"force"}, " to replace it"));
    if (present && kind_ == OutputKind::index) check_index_force();
  }

  const stdfs::path parent = abs.parent_path();
  std::error_code ec;
  stdfs::create_directories(parent, ec);
  if (ec) throw FormatError("cannot create directory " + parent.string() + ": " + ec.message());
  fs::remove_stale_staging_beside(out_);
  std::string templ = (parent / ("." + abs.filename().string() + ".fpgather-staging-XXXXXX")).string();
  if (!::mkdtemp(templ.data()))
    throw FormatError("cannot create a staging directory beside " + display_out_ + ": " + std::strerror(errno));
  root_ = templ;
  spdlog::debug("staging {} for {}", root_, display_out_);
  lock_fd_ = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (lock_fd_ >= 0 && !fs::lock_staging(lock_fd_)) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  staged_dir_ = root_ + "/new";
  if (kind_ != OutputKind::directory && ::mkdir(staged_dir_.c_str(), 0777) != 0) {
    const int e = errno;
    fs::remove_tree(root_);
    throw FormatError("cannot create " + staged_dir_ + ": " + std::strerror(e));
  }
}

// The files an existing index names are part of the output it replaces: listed to be moved away,
// and refused when one of them is an input.
void StagedOutput::check_index_force() {
  ShardIndex old;
  try {
    old = tensor_file_format().read_index(out_);
  } catch (const Error&) {
    return;  // not a readable index: only the file itself is replaced
  }
  for (const auto& shard : old.shard_files()) {
    const std::string path = final_dir_ + "/" + shard;
    const bool present = fs::exists(path, true), is_dir = fs::is_directory(path);
    if (!present || is_dir) continue;
    const std::string c = canonical_or_absolute(path).string();
    if (std::find(inputs_.begin(), inputs_.end(), c) != inputs_.end())
      throw UsageError(Message("OUT ", display_out_, " names the shard ", shard, ", an input file, which ", Field{"force"},
                               " would remove: choose another OUT"));
    old_files_.push_back(path);
  }
}

StagedOutput::~StagedOutput() {
  if (!root_.empty() && !keep_root_) fs::remove_tree(root_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string StagedOutput::final_path(const std::string& name) const {
  if (kind_ == OutputKind::file) return display_out_;
  return fs::join_path(display_dir_, name);
}

std::string StagedOutput::stage(const std::string& name) {
  if (committed_) throw InternalError("convert: a file staged after the output was committed");
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    throw InternalError("convert: output file name " + quoted_name(name));
  if (kind_ == OutputKind::file && name != stdfs::path(out_).filename().string())
    throw InternalError("convert: a single-file output staged " + quoted_name(name));
  if (std::find(names_.begin(), names_.end(), name) != names_.end())
    throw UsageError("two output files would be named " + final_path(name));
  if (kind_ == OutputKind::index && name != stdfs::path(out_).filename().string()) {
    const std::string target = final_dir_ + "/" + name;
    const bool present = fs::exists(target, true), is_dir = fs::is_directory(target);
    const std::string c = canonical_or_absolute(target).string();
    if (std::find(inputs_.begin(), inputs_.end(), c) != inputs_.end())
      throw UsageError("output file " + final_path(name) + " is an input file: choose another OUT");
    if (present && is_dir)
      throw UsageError("output file " + final_path(name) + " is a directory: choose another OUT");
    if (present && !force_) throw UsageError(Message(final_path(name), " exists: give ", Field{"force"}, " to replace it"));
  }
  if (kind_ == OutputKind::directory && !fs::exists(staged_dir_, true) && ::mkdir(staged_dir_.c_str(), 0777) != 0)
    throw FormatError("cannot create " + staged_dir_ + ": " + std::strerror(errno));
  names_.push_back(name);
  return staged_dir_ + "/" + name;
}

void StagedOutput::commit() {
  if (committed_) throw InternalError("convert: output committed twice");
  check_interrupt();  // a conversion stopped by a signal puts nothing in place
  if (!fs::exists(staged_dir_, true)) throw InternalError("convert: nothing was staged for " + display_out_);
  switch (kind_) {
    case OutputKind::file: commit_file(); break;
    case OutputKind::index: commit_index(); break;
    case OutputKind::directory: commit_directory(); break;
  }
  committed_ = true;
  fs::fsync_directory(stdfs::path(out_).parent_path().string());
  fs::remove_tree(root_);
  root_.clear();
  spdlog::info("committed {}", display_out_);
}

void StagedOutput::commit_file() {
  rename_or_throw(staged_dir_ + "/" + stdfs::path(out_).filename().string(), out_);
}

void StagedOutput::commit_index() {
  const std::string index_name = stdfs::path(out_).filename().string();
  std::vector<std::string> doomed = old_files_;
  for (const auto& n : names_) {
    const std::string target = final_dir_ + "/" + n;
    if (fs::exists(target, true) && std::find(doomed.begin(), doomed.end(), target) == doomed.end())
      doomed.push_back(target);
  }
  const std::string trash = root_ + "/old";
  if (::mkdir(trash.c_str(), 0777) != 0) throw FormatError("cannot create " + trash + ": " + std::strerror(errno));
  std::vector<std::pair<std::string, std::string>> moved;  // (from, to), to undo
  std::vector<std::string> placed;
  try {
    for (size_t i = 0; i < doomed.size(); ++i) {
      const std::string to = trash + "/" + std::to_string(i);
      rename_or_throw(doomed[i], to);
      moved.emplace_back(doomed[i], to);
    }
    // Every other file first, the index last: readers find no index until its files are there.
    std::vector<std::string> order;
    for (const auto& n : names_)
      if (n != index_name) order.push_back(n);
    order.push_back(index_name);
    for (const auto& n : order) {
      const std::string from = staged_dir_ + "/" + n, to = final_dir_ + "/" + n;
      if (!fs::exists(from, true)) continue;
      rename_or_throw(from, to);
      placed.push_back(to);
    }
  } catch (const Error& e) {
    for (const auto& p : placed) ::unlink(p.c_str());
    bool restored = true;
    for (auto it = moved.rbegin(); it != moved.rend(); ++it)
      restored = ::rename(it->second.c_str(), it->first.c_str()) == 0 && restored;
    if (!restored) {
      keep_root_ = true;
      throw FormatError(std::string(e.what()) + "; the replaced files are kept in " + trash);
    }
    throw;
  }
}

void StagedOutput::commit_directory() {
  fs::fsync_directory(staged_dir_);
  if (!fs::exists(out_, true)) {
    rename_or_throw(staged_dir_, out_);
    return;
  }
  if (list_dir(out_).empty()) {  // fill it: the directory the user made stays
    for (const auto& n : list_dir(staged_dir_)) rename_or_throw(staged_dir_ + "/" + n, out_ + "/" + n);
    fs::fsync_directory(out_);
    return;
  }
  if (exchange_paths(staged_dir_, out_)) return;  // the old output is now staged_dir_, removed with root_
  const std::string old = root_ + "/old";
  rename_or_throw(out_, old);
  if (::rename(staged_dir_.c_str(), out_.c_str()) != 0) {
    const int e = errno;
    if (::rename(old.c_str(), out_.c_str()) != 0) keep_root_ = true;
    throw FormatError("cannot rename " + staged_dir_ + " to " + out_ + ": " + std::strerror(e) +
                      (keep_root_ ? "; the replaced output is kept in " + old : ""));
  }
}

}  // namespace fpg::app::convert
