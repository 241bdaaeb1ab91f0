// Megatron-Core's model section written from whole parameters (ckpt/megatron_model_writer.h): the keys,
// pieces, objects and common state `dist_checkpointing.save` leaves for a model at TP × PP × EP, in a
// DcpWriter (FORMAT.md beside this file, "Writing a model section").
//
//   keys        a decoder layer's parameter is stacked with the same parameter of every other layer
//               along a prepended layer axis ("decoder.layers.mlp.linear_fc1.weight" [L, …]) when every
//               layer holds the same parameters; otherwise (mixed dense and MoE layers) each layer is
//               keyed by its index ("decoder.layers.1.mlp.router.weight"), as Megatron's
//               non-homogeneous layers are. An expert's parameter stacks the experts along the next
//               prepended axis ("….mlp.experts.experts.linear_fc1.weight" [L, E, …]).
//   pieces      each parameter cut for TP as Megatron's parallel linears cut it (tensor_parallel_params:
//               column-parallel linear_qkv, linear_fc1, embedding and output layer on axis 0, a gated
//               linear_fc1 as [w_0 … w_{T-1}, v_0 … v_{T-1}]; row-parallel linear_proj and linear_fc2 on
//               axis 1; norms and routers whole), experts alike at expert TP = TP; one chunk per piece,
//               only the main replica.
//   files       the piece of TP rank t on stage p (layers [p·L/PP, (p+1)·L/PP); the parameters before the
//               layers on the first stage, after them on the last) goes to `__R_0.distcp` with
//               R = t + TP·(d + EP·p): DP rank d = 0, or for an expert the expert-parallel rank holding it
//               (experts [e·E/EP, (e+1)·E/EP)), the world being TP × EP × PP ranks (DP = EP).
//   objects     per module the `_extra_state` ShardedObject "KEY._extra_state/shard_O_S" (O, S: the
//               prepended offsets and sizes joined by '.', "0_1" without any) holding [None]; the common
//               state "common_state/shard_0_1" holding [{checkpoint_version 3.0, iteration 0,
//               content_metadata {singleton_local_shards False, chained_optim_avoid_prefix True}}]
//               (no optimizer: its sharding type is left out); metadata.json of torch_dist.
#pragma once

#include <memory>

#include "ckpt/megatron_model_writer.h"

namespace fpg::dcp {

std::unique_ptr<ckpt::MegatronModelWriter> make_model_section_writer();

}  // namespace fpg::dcp
