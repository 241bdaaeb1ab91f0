#include "formats/dcp/megatron/megatron_common_state.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/printable.h"
#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/reader.h"

namespace fpg::dcp {

namespace {

using Kind = Value::Kind;

// The args inspect's summary line names, where saved: the parallel layout, the model's size, the
// optimizer and the batch.
constexpr std::string_view kSummaryArgs[] = {
    "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
    "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "num_layers",
    "hidden_size", "num_attention_heads", "num_query_groups", "num_experts", "padded_vocab_size", "optimizer",
    "lr", "micro_batch_size", "global_batch_size", "train_iters"};

// `budget` counts the JSON values still allowed: a pickle can share one list many times over, so
// what it expands to is charged, not what it stores.
nlohmann::json to_json(const Value& v, uint64_t& budget, int depth = 0) {
  if (budget == 0) return printable(v.repr(200));
  --budget;
  switch (v.kind()) {
    case Kind::none: return nullptr;
    case Kind::boolean: return v.as_bool();
    case Kind::integer: return v.as_int();
    case Kind::floating: return v.as_float();
    case Kind::str: return printable(v.as_str().substr(0, 4096));  // a shared long string, charged once per use
    case Kind::list:
    case Kind::tuple:
      if (depth < 4 && v.items().size() <= budget) {
        nlohmann::json a = nlohmann::json::array();
        for (const Value& i : v.items()) a.push_back(to_json(i, budget, depth + 1));
        return a;
      }
      [[fallthrough]];
    default: return printable(v.repr(200));
  }
}

}  // namespace

nlohmann::json common_state_json(const MegatronCommonState& s) {
  nlohmann::json j = nlohmann::json::object();
  j["iteration"] = s.iteration ? nlohmann::json(*s.iteration) : nlohmann::json();
  j["checkpoint_version"] = s.checkpoint_version ? nlohmann::json(*s.checkpoint_version) : nlohmann::json();
  j["sharding_type"] = s.sharding_type ? nlohmann::json(*s.sharding_type) : nlohmann::json();
  nlohmann::json args = nlohmann::json::object();
  uint64_t budget = 1u << 16;
  for (const auto& [k, v] : s.args) args[printable(k)] = to_json(v, budget);
  j["args"] = args;
  return j;
}

const Value* MegatronCommonState::arg(std::string_view name) const {
  for (const auto& [k, v] : args)
    if (k == name) return &v;
  return nullptr;
}

std::optional<int64_t> MegatronCommonState::int_arg(std::string_view name) const {
  const Value* v = arg(name);
  if (v && v->is(Kind::integer)) return v->as_int();
  return std::nullopt;
}

std::optional<MegatronCommonState> read_common_state(const Reader& r) {
  const Entry* entry = nullptr;
  for (const Entry& e : r.metadata().entries)
    if (!e.is_tensor && e.fqn.rfind(kCommonStatePrefix, 0) == 0) entry = &e;
  if (!entry) return std::nullopt;
  const std::string where = r.dir() + ": " + printable(entry->fqn);
  const Value stored = r.read_object(*entry);
  if (!stored.is(Kind::list) || stored.items().size() != 1 || !stored.items()[0].is(Kind::dict))
    throw FormatError(where + ": expected [dict], found " + stored.repr(80));
  const Value& state = stored.items()[0];
  MegatronCommonState s;
  if (const Value* it = state.find("iteration")) {
    if (!it->is(Kind::integer)) throw FormatError(where + ": iteration is " + it->repr(40) + ", not an integer");
    s.iteration = it->as_int();
  }
  if (const Value* v = state.find("checkpoint_version")) {
    if (v->is(Kind::floating)) s.checkpoint_version = v->as_float();
    else if (v->is(Kind::integer)) s.checkpoint_version = static_cast<double>(v->as_int());
    else throw FormatError(where + ": checkpoint_version is " + v->repr(40) + ", not a number");
  }
  if (const Value* c = state.find("content_metadata"); c && c->is(Kind::dict))
    if (const Value* t = c->find(kShardingTypeField); t && t->is(Kind::str)) s.sharding_type = t->as_str();
  if (const Value* a = state.find("args"); a && !a->is_none()) {
    // argparse.Namespace pickles as NEWOBJ + BUILD with its attributes as the state.
    if (!a->is(Kind::object) || a->name() != "argparse.Namespace" || !a->state().is(Kind::dict))
      throw FormatError(where + ": args is " + a->repr(60) + ", not an argparse.Namespace");
    for (const auto& [k, v] : a->state().entries())
      if (k.is(Kind::str)) s.args.emplace_back(k.as_str(), v);
  }
  return s;
}

std::string common_state_line(const MegatronCommonState& s) {
  std::string line;
  if (s.iteration) line += fmt::format("iteration {}", *s.iteration);
  if (s.checkpoint_version)
    line += fmt::format("{}checkpoint_version {}", line.empty() ? "" : ", ", Value::floating(*s.checkpoint_version).repr());
  if (!s.args.empty()) {
    line += fmt::format("{}{} saved args", line.empty() ? "" : "; ", s.args.size());
    std::string named;
    for (std::string_view name : kSummaryArgs)
      if (const Value* v = s.arg(name); v && !v->is_none())
        named += (named.empty() ? "" : ", ") + std::string(name) + " " + printable(v->repr(40));
    if (!named.empty()) line += ": " + named;
  }
  return line;
}

}  // namespace fpg::dcp
