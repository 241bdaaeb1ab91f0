// Writing one optimizer group of Megatron's `dp_reshardable` form (FORMAT.md beside this file, "The
// bucket space"): its per_bucket_numel objects and, per (buffer, bucket, state), each DP rank's shard
// as chunks, the parameters' fragments as data and the gaps between them as zeros, clipped to the
// bucket's numel_unpadded (the tail padding belongs to the layout and is never stored), as
// Megatron-Core's sharded_param_state_dp_reshardable lays them out. The reshard and the synthetic
// checkpoints of the benchmarks write through this.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/reader.h"
#include "layout/bucketed_layout.h"

namespace fpg::dcp {

// Megatron stores a ShardedObject (and the common state) as a list of the one object saved.
Value wrap_object(Value v);
// The one object of such a list; FormatError naming `where` otherwise.
const Value& unwrap_object(const Value& v, const std::string& where);
// A dict value with `key` set to `value` (replaced in place, or appended).
Value with_entry(const Value& dict, const std::string& key, Value value);

// per_bucket_numel (padded) or per_bucket_numel_unpadded of a layout, as stored:
// [[{(torch.P, torch.G): [sizes]} per buffer]].
Value bucket_sizes_value(const layout::BucketedLayout& L, bool padded);

// Serves a writer's fill calls from one buffer filled once.
FillBytes from_buffer(std::shared_ptr<std::vector<uint8_t>> buf);

// Serves a writer's byte-range fill calls over 4-byte elements from first_element on by
// read(a, b, dst): elements [a, b) into dst (a range that splits an element is read through a
// buffer of whole ones).
FillBytes element_fill(std::function<void(uint64_t a, uint64_t b, uint8_t* dst)> read, uint64_t first_element);

// The fill of elements [param_begin, …) of spec parameter `param`'s state `state` (4-byte elements).
using FragmentFill = std::function<FillBytes(uint32_t param, const std::string& state, uint64_t param_begin)>;
// Elements [param_begin, param_end) of spec parameter `param`'s state `state` (4-byte elements) lent
// from a buffer the producer holds until the fragment is written: no copy into the writer's block.
using FragmentLend =
    std::function<BorrowBytes(uint32_t param, const std::string& state, uint64_t param_begin, uint64_t param_end)>;

struct GroupWriteCount {
  uint64_t chunks = 0, bytes = 0;
};

// Copies every chunk of the source's tensor entry `e` unchanged, chunk c to rank file
// rank_of(the rank of the file that stores it); each chunk's buffer sized by what its item holds
// (Reader::stored_chunk_bytes) before it is allocated.
void copy_tensor_chunks(DcpWriter& w, const Reader& r, const Entry& e, const std::function<uint32_t(uint64_t)>& rank_of,
                        GroupWriteCount& count);

// Declares the group's per_bucket_numel objects and its bucket keys (fp32, extent numel_unpadded)
// for `states` (Megatron's names: "param" is the master).
void declare_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                           const std::vector<std::string>& states);

// Writes what declare_group_buckets declared: the objects on rank file `object_rank`, DP rank d's
// shard chunks on rank file rank_file(d). With `dp_rank`, only that DP rank's chunks (and the objects
// with DP rank 0): each DP rank's file then written by a thread of its own.
GroupWriteCount write_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                                    const std::vector<std::string>& states, uint32_t object_rank,
                                    const std::function<uint32_t(uint32_t)>& rank_file, const FragmentFill& fill,
                                    std::optional<uint32_t> dp_rank = std::nullopt);
// The same, each fragment's bytes lent by `lend`.
GroupWriteCount write_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                                    const std::vector<std::string>& states, uint32_t object_rank,
                                    const std::function<uint32_t(uint32_t)>& rank_file, const FragmentLend& lend,
                                    std::optional<uint32_t> dp_rank = std::nullopt);

}  // namespace fpg::dcp
