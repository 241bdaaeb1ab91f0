#include "formats/dcp/megatron/bucket_writer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "formats/dcp/checkpoint_dir.h"

#include "formats/dcp/megatron/megatron_keys.h"
#include "formats/dcp/torch_dtype.h"

namespace fpg::dcp {

FillBytes from_buffer(std::shared_ptr<std::vector<uint8_t>> buf) {
  return [buf](uint64_t offset, void* dst, size_t size) { std::memcpy(dst, buf->data() + offset, size); };
}

void copy_tensor_chunks(DcpWriter& w, const Reader& r, const Entry& e, const std::function<uint32_t(uint64_t)>& rank_of,
                        GroupWriteCount& count) {
  for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
    auto buf = std::make_shared<std::vector<uint8_t>>(r.stored_chunk_bytes(e, c));
    r.read_chunk(e, c, buf->data(), buf->size());
    const uint64_t source_rank = storage_file_rank(r.storage(e, c).relative_path).value_or(0);
    w.rank(rank_of(source_rank)).write_tensor(e.fqn, e.tensor.chunks[c].offsets, e.tensor.chunks[c].sizes,
                                              from_buffer(buf));
    ++count.chunks;
    count.bytes += buf->size();
  }
}

FillBytes element_fill(std::function<void(uint64_t a, uint64_t b, uint8_t* dst)> read, uint64_t first_element) {
  return [read = std::move(read), first_element](uint64_t offset, void* dst, size_t size) {
    const uint64_t a = offset / 4, b = (offset + size + 3) / 4;
    if (offset % 4 == 0 && size % 4 == 0) return read(first_element + a, first_element + b, static_cast<uint8_t*>(dst));
    std::vector<uint8_t> tmp((b - a) * 4);
    read(first_element + a, first_element + b, tmp.data());
    std::memcpy(dst, tmp.data() + offset % 4, size);
  };
}
namespace {

using Kind = Value::Kind;

Value int_list(const std::vector<uint64_t>& xs) {
  std::vector<Value> items;
  for (uint64_t x : xs) items.push_back(Value::integer(static_cast<int64_t>(x)));
  return Value::sequence(Kind::list, std::move(items));
}

}  // namespace

Value wrap_object(Value v) { return Value::sequence(Kind::list, {std::move(v)}); }

const Value& unwrap_object(const Value& v, const std::string& where) {
  if (!v.is(Kind::list) || v.items().size() != 1) throw FormatError(where + ": expected [object], found " + v.repr(80));
  return v.items()[0];
}

Value with_entry(const Value& dict, const std::string& key, Value value) {
  std::vector<std::pair<Value, Value>> entries = dict.entries();
  for (auto& [k, v] : entries)
    if (k.is(Kind::str) && k.as_str() == key) {
      v = std::move(value);
      return Value::dict(std::move(entries));
    }
  entries.emplace_back(Value::str(key), std::move(value));
  return Value::dict(std::move(entries));
}

Value bucket_sizes_value(const layout::BucketedLayout& L, bool padded) {
  std::vector<Value> bufs;
  for (const layout::Buffer& b : L.buffers) {
    std::vector<uint64_t> sizes;
    for (const layout::Bucket& k : b.buckets) sizes.push_back(padded ? k.numel() : k.numel_unpadded);
    Value key = Value::sequence(Kind::tuple, {Value::global("torch." + std::string(torch_dtype_name(b.key.param_dtype))),
                                              Value::global("torch." + std::string(torch_dtype_name(b.key.grad_dtype)))});
    bufs.push_back(Value::dict({{std::move(key), int_list(sizes)}}));
  }
  return wrap_object(Value::sequence(Kind::list, std::move(bufs)));
}

void declare_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                           const std::vector<std::string>& states) {
  const TorchDType& f32 = *find_torch_dtype("float32");
  w.declare_bytes(group_object_key(group, kPerBucketNumel));
  w.declare_bytes(group_object_key(group, kPerBucketNumelUnpadded));
  for (uint32_t b = 0; b < L.buffers.size(); ++b)
    for (uint32_t k = 0; k < L.buffers[b].buckets.size(); ++k)
      for (const std::string& state : states)
        w.declare_tensor(bucket_key_name(group, b, L.buffers[b].key.param_dtype, L.buffers[b].key.grad_dtype, k, state),
                         f32, {L.buffers[b].buckets[k].numel_unpadded});
}

namespace {

// write_group_buckets with each fragment's bytes from fragment_bytes(fragment, state, begin, end)
// (a FillBytes or a BorrowBytes); the gaps between fragments as zeros.
template <typename FragmentBytes>
GroupWriteCount write_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                              const std::vector<std::string>& states, uint32_t object_rank,
                              const std::function<uint32_t(uint32_t)>& rank_file, const FragmentBytes& fragment_bytes,
                              std::optional<uint32_t> dp_rank) {
  GroupWriteCount n;
  if (!dp_rank || *dp_rank == 0) {
    w.rank(object_rank).write_object(group_object_key(group, kPerBucketNumel), bucket_sizes_value(L, true));
    w.rank(object_rank).write_object(group_object_key(group, kPerBucketNumelUnpadded), bucket_sizes_value(L, false));
  }
  struct Piece {
    uint64_t lo, hi;
    const layout::Fragment* frag;
  };
  const FillBytes zeros = [](uint64_t, void* d, size_t size) { std::memset(d, 0, size); };
  std::vector<Piece> pieces;
  for (uint32_t b = 0; b < L.buffers.size(); ++b) {
    const layout::Buffer& buf = L.buffers[b];
    for (uint32_t k = 0; k < buf.buckets.size(); ++k) {
      const layout::Bucket& bucket = buf.buckets[k];
      for (const std::string& state : states) {
        const std::string key = bucket_key_name(group, b, buf.key.param_dtype, buf.key.grad_dtype, k, state);
        for (const layout::Shard& shard : bucket.shards) {
          if (dp_rank && shard.rank != *dp_rank) continue;
          const uint64_t lo0 = shard.world.begin - bucket.world.begin;
          const uint64_t hi0 = std::min(shard.world.end - bucket.world.begin, bucket.numel_unpadded);
          pieces.clear();
          for (const layout::Fragment& f : shard.fragments)
            pieces.push_back({f.world_in_bucket.begin, f.world_in_bucket.end, &f});
          for (const layout::Range& p : shard.padding)
            if (p.begin < hi0) pieces.push_back({std::max(p.begin, lo0), std::min(p.end, hi0), nullptr});
          std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& c) { return a.lo < c.lo; });
          DcpRankWriter& out = w.rank(rank_file(shard.rank));
          for (const Piece& p : pieces) {
            if (p.hi <= p.lo) continue;
            if (p.frag) {
              const uint64_t begin = p.frag->param_range.begin;
              out.write_tensor(key, {p.lo}, {p.hi - p.lo}, fragment_bytes(p.frag->param, state, begin, begin + (p.hi - p.lo)));
            } else {
              out.write_tensor(key, {p.lo}, {p.hi - p.lo}, zeros);
            }
            ++n.chunks;
            n.bytes += (p.hi - p.lo) * 4;
          }
        }
      }
    }
  }
  return n;
}

}  // namespace

GroupWriteCount write_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                                    const std::vector<std::string>& states, uint32_t object_rank,
                                    const std::function<uint32_t(uint32_t)>& rank_file, const FragmentFill& fill,
                                    std::optional<uint32_t> dp_rank) {
  return write_buckets(
      w, group, L, states, object_rank, rank_file,
      [&fill](uint32_t param, const std::string& state, uint64_t begin, uint64_t) { return fill(param, state, begin); },
      dp_rank);
}

GroupWriteCount write_group_buckets(DcpWriter& w, const std::string& group, const layout::BucketedLayout& L,
                                    const std::vector<std::string>& states, uint32_t object_rank,
                                    const std::function<uint32_t(uint32_t)>& rank_file, const FragmentLend& lend,
                                    std::optional<uint32_t> dp_rank) {
  return write_buckets(w, group, L, states, object_rank, rank_file, lend, dp_rank);
}

}  // namespace fpg::dcp
