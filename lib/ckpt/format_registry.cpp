#include "ckpt/format_registry.h"

#include <sys/stat.h>

#include "core/error.h"
#include "core/log.h"

namespace fpg::ckpt {

void FormatRegistry::add(std::unique_ptr<Format> format) { formats_.push_back(std::move(format)); }

const Format* FormatRegistry::find(std::string_view name) const {
  for (const auto& f : formats_)
    if (f->name() == name) return f.get();
  return nullptr;
}

const Format* FormatRegistry::probe(const std::string& path) const {
  for (const auto& f : formats_)
    if (f->probe(path)) return f.get();
  return nullptr;
}

std::unique_ptr<Checkpoint> FormatRegistry::open(const std::string& path) const {
  if (const Format* f = probe(path)) {
    spdlog::debug("{}: opening as {}", path, f->name());
    return f->open(path);
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw FormatError(path + ": no such file or directory");
  std::string looked_for, files;
  for (size_t i = 0; i < formats_.size(); ++i)
    looked_for += (i == 0 ? "" : i + 1 == formats_.size() ? " or " : ", ") + std::string(formats_[i]->signature());
  for (const auto& f : formats_)
    if (!f->file_signature().empty()) files += (files.empty() ? "" : ", or ") + std::string(f->file_signature());
  if (S_ISDIR(st.st_mode)) throw FormatError(path + ": not a checkpoint: a directory holding no " + looked_for);
  throw FormatError(path + ": not a checkpoint: a file, where a checkpoint is a directory holding " + looked_for +
                    (files.empty() ? std::string() : "; the one file taken is " + files));
}

}  // namespace fpg::ckpt
