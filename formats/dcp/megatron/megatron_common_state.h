// The non-sharded state of a Megatron torch_dist checkpoint: the `common_state/shard_0_1` bytes item
// (megatron/FORMAT.md, "Keys"), a torch.save of `[state]`. Megatron-LM's training loop puts its
// training args there (an argparse.Namespace, read as plain data: its attributes), the iteration and
// checkpoint_version; the Megatron-Core API used directly may store only the optimizer's form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/dcp/pickle/pickle_value.h"

namespace fpg::dcp {

class Reader;

struct MegatronCommonState {
  std::optional<int64_t> iteration;
  std::optional<double> checkpoint_version;
  std::optional<std::string> sharding_type;  // content_metadata's distrib_optim_sharding_type
  std::vector<std::pair<std::string, Value>> args;  // the saved training args, in saved order; none if absent

  // The saved arg `name`, or nullptr.
  const Value* arg(std::string_view name) const;
  // The saved arg `name` as an integer, when it is one (None and absence: nullopt).
  std::optional<int64_t> int_arg(std::string_view name) const;
};

// The checkpoint's common state; nullopt when it has no common_state item. FormatError (naming the
// item) when it does not hold `[dict]`, or when a field has a type Megatron never writes there.
std::optional<MegatronCommonState> read_common_state(const Reader& r);

// One line for inspect: "iteration 3, checkpoint_version 3.0; saved args: TP 2, PP 2, …", or "" when
// the state records none of these.
std::string common_state_line(const MegatronCommonState& s);

// For inspect --json: iteration, checkpoint_version, sharding_type and every saved arg (numbers,
// strings, booleans and None as themselves, lists of them as arrays, anything else as its repr).
nlohmann::json common_state_json(const MegatronCommonState& s);

}  // namespace fpg::dcp
