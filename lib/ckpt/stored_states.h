// How a training checkpoint stores its optimizer state: the part of the optimizer document
// (doc::optimizer) that the checkpoint layer interprets, for the layout check, the per-param state
// map and the views of bucket-layout state. The rest of the document (the optimizer, its
// hyperparameters, the step) is app/checkpoint/state_documents.h's.
//   "state_layout":  "bucket" | "model" (key_names.h)
//   "states":        ["master", <the optimizer's states>...]: the state of each bucketed param
//   "matrix_states": the same for layer-wise matrices (Muon's); absent: as "states"
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ckpt/key_names.h"

namespace fpg {
class JsonField;
}

namespace fpg::ckpt {

struct StoredStates {
  StateLayout layout = StateLayout::model;
  std::vector<std::string> states;
  // Layer-wise matrices' states: written only when not empty; read as `states` when absent.
  std::vector<std::string> matrix_states;
};

// Sets the three fields in the optimizer document `optimizer` (an object); "matrix_states" only
// when there are layer-wise matrices.
void put_stored_states(nlohmann::json& optimizer, const StoredStates& s);

// Reads them from the optimizer document; matrix_states defaults to states. FormatError naming the
// document and field when one is missing or malformed, or a list does not start with "master".
StoredStates read_stored_states(const JsonField& optimizer);

}  // namespace fpg::ckpt
