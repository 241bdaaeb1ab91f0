// Free-form JSON documents stored in a checkpoint index: the model spec, the layout, the optimizer
// config and step, the FP8 recipe state, the data cursor and RNG state. The checkpoint layer does not
// interpret them (except `optimizer`'s stored-state fields, stored_states.h, and `layout`, for the
// layout check in layout_check.h); app/checkpoint/state_documents.h writes and reads the rest. Names
// are short identifiers.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace fpg::ckpt {

// Well-known document names (formats/fpckpt stores each as /documents/<name> in the index).
namespace doc {
constexpr const char* model = "model";          // model spec JSON (lib/model/spec_json.h)
constexpr const char* layout = "layout";        // layout JSON (lib/layout/layout_json.h)
constexpr const char* optimizer = "optimizer";  // {"name", hyperparameters, "step", "state_layout", "states"}
constexpr const char* fp8 = "fp8";              // FP8 recipe and its state (scales, amax histories)
constexpr const char* data = "data";            // data-order cursor
constexpr const char* rng = "rng";              // RNG state
}  // namespace doc

class Documents {
 public:
  // Stores `json` under `name` (replacing). UsageError if the name is not [A-Za-z0-9_.-]{1,64} or the
  // text is not valid JSON, so a checkpoint never carries a document a reader cannot parse.
  void set(const std::string& name, std::string json);
  std::optional<std::string> get(const std::string& name) const;
  bool has(const std::string& name) const { return docs_.count(name) != 0; }
  void erase(const std::string& name) { docs_.erase(name); }
  const std::map<std::string, std::string>& all() const { return docs_; }
  size_t size() const { return docs_.size(); }
  // Without checks: for readers (the index reader checks names itself).
  void set_unchecked(const std::string& name, std::string json) { docs_[name] = std::move(json); }

  static bool valid_name(const std::string& name);

 private:
  std::map<std::string, std::string> docs_;
};

}  // namespace fpg::ckpt
