#include "ckpt/state_view.h"

#include <unordered_map>

#include "ckpt/key_names.h"
#include "ckpt/stored_states.h"
#include "core/json_reader.h"
#include "layout/layout_json.h"
#include "model/spec_json.h"

namespace fpg::ckpt {

std::optional<std::vector<ViewedState>> bucket_state_view(const Index& ix) {
  const auto opt_doc = ix.documents.get(doc::optimizer), layout_doc = ix.documents.get(doc::layout),
             model_doc = ix.documents.get(doc::model);
  if (!opt_doc || !layout_doc || !model_doc) return std::nullopt;
  try {
    const StoredStates stored = read_stored_states(JsonDocument(*opt_doc, "optimizer document").root());
    if (stored.layout != StateLayout::bucket) return std::nullopt;
    const std::vector<std::string>& states = stored.states;
    const model::ModelSpec spec = model::parse_spec_json(*model_doc, "model document");
    const std::string kind = JsonDocument(*layout_doc, "layout document").root().get<std::string>("kind", "");
    layout::BucketedLayout L;
    if (kind == "bucketed") L = layout::bucketed_layout_from_json(*layout_doc, "layout document");
    else if (kind == "layer_wise") L = layout::layer_wise_layout_from_json(*layout_doc, "layout document").scalar;
    else return std::nullopt;
    std::unordered_map<std::string, uint32_t> key_of;
    for (uint32_t k = 0; k < ix.keys.size(); ++k) key_of.emplace(ix.keys[k].name, k);
    std::vector<ViewedState> out;
    for (uint32_t b = 0; b < L.buffers.size(); ++b)
      for (const layout::ParamSlot& slot : L.buffers[b].params) {
        const layout::Bucket& bucket = L.buffers[b].buckets.at(slot.bucket);
        for (const std::string& s : states) {
          const auto it = key_of.find(bucket_state_key(b, slot.bucket, s));
          if (it == key_of.end()) return std::nullopt;
          const KeyKind kind_of = s == "master" ? KeyKind::master : KeyKind::optimizer_state;
          const model::Param& param = spec.params.at(slot.param);
          // Documents that place a state outside its bucket key do not describe this index.
          const uint64_t extent = ix.keys[it->second].numel();
          if (slot.world.begin < bucket.world.begin || slot.world.begin - bucket.world.begin > extent ||
              param.numel() > extent - (slot.world.begin - bucket.world.begin))
            return std::nullopt;
          out.push_back({{model_state_key(slot.name, s), DType::F32, param.shape, kind_of},
                         it->second,
                         slot.world.begin - bucket.world.begin});
        }
      }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace fpg::ckpt
