// The formats a build reads, in the order they are probed. lib/ fills nothing in: the built-in
// registry is made by formats/registry.cpp (builtin_formats below is declared here and defined there),
// so a new format is one folder under formats/ and one line in that file.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/checkpoint_format.h"

namespace fpg::ckpt {

class FormatRegistry {
 public:
  void add(std::unique_ptr<Format> format);
  const std::vector<std::unique_ptr<Format>>& formats() const { return formats_; }
  // The format named `name` (Format::name); nullptr when there is none.
  const Format* find(std::string_view name) const;
  // The first format whose probe recognises `path`; nullptr when none does.
  const Format* probe(const std::string& path) const;
  // Opens `path` with the format that recognises it. FormatError when none does, naming the path
  // (missing, or what it is) and what each format looks for.
  std::unique_ptr<Checkpoint> open(const std::string& path) const;

 private:
  std::vector<std::unique_ptr<Format>> formats_;
};

// The formats this build reads, and builtin_formats().open(path): both defined in
// formats/registry.cpp, so that only the layers above formats (app, api) refer to them and a static
// link resolves them in layer order.
const FormatRegistry& builtin_formats();
std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path);

}  // namespace fpg::ckpt
