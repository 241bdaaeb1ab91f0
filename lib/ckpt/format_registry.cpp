#include "ckpt/format_registry.h"

#include <sys/stat.h>

#include "core/error.h"

namespace fpg::ckpt {

void FormatRegistry::add(std::unique_ptr<Format> format) { formats_.push_back(std::move(format)); }

const Format* FormatRegistry::probe(const std::string& path) const {
  for (const auto& f : formats_)
    if (f->probe(path)) return f.get();
  return nullptr;
}

std::unique_ptr<Checkpoint> FormatRegistry::open(const std::string& path) const {
  if (const Format* f = probe(path)) return f->open(path);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw FormatError(path + ": no such file or directory");
  std::string looked_for;
  for (size_t i = 0; i < formats_.size(); ++i)
    looked_for += (i == 0 ? "" : i + 1 == formats_.size() ? " or " : ", ") + std::string(formats_[i]->signature());
  throw FormatError(path + ": not a checkpoint: " + (S_ISDIR(st.st_mode) ? "a directory" : "a file") +
                    " holding no " + looked_for);
}

}  // namespace fpg::ckpt
