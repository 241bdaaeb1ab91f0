#include "ckpt/stored_states.h"

#include <nlohmann/json.hpp>

#include "core/json_reader.h"

namespace fpg::ckpt {
namespace {

// A list of state names: the master weights first, then the optimizer's.
std::vector<std::string> state_names(const JsonField& f) {
  std::vector<std::string> out = f.strings();
  if (out.empty() || out.front() != "master") f.fail("does not start with \"master\"");
  return out;
}

}  // namespace

void put_stored_states(nlohmann::json& optimizer, const StoredStates& s) {
  optimizer["state_layout"] = std::string(state_layout_name(s.layout));
  optimizer["states"] = s.states;
  if (s.matrix_states.empty()) optimizer.erase("matrix_states");
  else optimizer["matrix_states"] = s.matrix_states;
}

StoredStates read_stored_states(const JsonField& optimizer) {
  StoredStates s;
  const JsonField layout = optimizer.at("state_layout");
  const auto sl = parse_state_layout(layout.str());
  if (!sl) layout.fail("neither \"bucket\" nor \"model\"");
  s.layout = *sl;
  s.states = state_names(optimizer.at("states"));
  const auto matrix = optimizer.find("matrix_states");
  s.matrix_states = matrix ? state_names(*matrix) : s.states;
  return s;
}

}  // namespace fpg::ckpt
