// Writing a PyTorch Distributed Checkpoint (and a Megatron-Core `torch_dist` checkpoint, which is one
// with a metadata.json beside it) in bounded memory, committed atomically.
//
// Layout, as torch's FileSystemWriter leaves it with one writer thread per rank: one data file per
// rank, `__R_0.distcp`, holding that rank's items back to back — a tensor chunk as torch.save(chunk)
// (DCP's default TORCH_SAVE serialization, torch_save_writer.h), a bytes item as its raw bytes (for
// an object, torch.save(object), as DCP's planner serializes it) — and `.metadata`, the pickled
// Metadata (metadata_writer.h) with the keys in declaration order, each tensor's chunks and the
// storage entries in rank order then write order, version "1.0.0" and a StorageMeta naming the
// target and a fresh save id.
//
// Use: declare every key (state_dict_metadata order), then write each rank's items through rank(r)
// one at a time, then commit(). An item's data passes through one buffer of an I/O block (or is written
// from the producer's own blocks), headers and pickles through a 1 MiB buffer per rank; nothing of an
// item is kept but its place in the file. Distinct ranks may be written from distinct threads at once;
// declarations must be complete before the first item is written.
//
// commit() refuses (fpg::UsageError, naming the key and chunks) a checkpoint that torch could not load
// whole: a tensor whose chunks do not tile it exactly (box_coverage.h: an overlap or a gap), a tensor
// without chunks, a bytes key written other than once. It then writes
// .metadata (and metadata.json), fsyncs every file and the directory, and renames the staging
// directory (".NAME.tmp-*" beside the target) into place (fpckpt::publish_staging). A writer destroyed
// before commit() removes its staging directory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "formats/dcp/byte_sink.h"
#include "formats/dcp/megatron/megatron_metadata.h"
#include "formats/dcp/metadata/metadata.h"
#include "formats/dcp/pickle/pickle_value.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/torch_save/torch_save_writer.h"
#include "formats/fpckpt/commit.h"

namespace fpg::dcp {

// metadata.json of Megatron-Core 0.19.2 for a torch_dist checkpoint:
// {"sharded_backend": "torch_dist", "sharded_backend_version": 1}.
MegatronMetadata megatron_torch_dist_metadata();

// metadata.json's text as Megatron writes it (json.dump: ", " and ": " separators, ASCII).
std::string megatron_metadata_json(const MegatronMetadata& m);

struct DcpWriteOptions {
  // Written as metadata.json when set (megatron_torch_dist_metadata() for Megatron-Core).
  std::optional<MegatronMetadata> megatron;
  // planner_data as torch's default planner writes it, {fqn: path}: each key's path in the nested
  // state dict it was flattened from (declare_tensor's planner_path; (fqn,) for a key declared
  // without one), which torch's format_utils (dcp_to_torch_save) rebuild the nesting from; false
  // writes None, as Megatron-Core does.
  bool planner_data = true;
  // storage_meta.checkpoint_id: the path the checkpoint is known by once in place, where it is
  // written at `target` and moved there after the commit (a staged output); default: `target`.
  std::optional<std::string> checkpoint_id;
  size_t io_block_bytes = kDefaultIoBlockBytes;
};

class DcpWriter;

// The items of one rank, appended to its data file.
class DcpRankWriter {
 public:
  ~DcpRankWriter();
  DcpRankWriter(const DcpRankWriter&) = delete;
  DcpRankWriter& operator=(const DcpRankWriter&) = delete;

  // Appends torch.save of the chunk at `offsets` with `sizes` of the declared tensor `fqn`; `fill`
  // supplies the chunk's bytes (row-major within the chunk). Throws fpg::UsageError for an undeclared
  // or bytes key, offsets or sizes of the wrong arity, a chunk reaching outside the tensor; errors of
  // `fill` and fpg::FormatError for a failed write propagate, after which this rank refuses more items.
  void write_tensor(const std::string& fqn, const std::vector<uint64_t>& offsets,
                    const std::vector<uint64_t>& sizes, const FillBytes& fill);
  // The same, the chunk's bytes lent by `borrow` in blocks of the I/O block size and written to the file
  // from there: no copy, and no checksum pass where the blocks come with their CRC-32.
  void write_tensor(const std::string& fqn, const std::vector<uint64_t>& offsets,
                    const std::vector<uint64_t>& sizes, const BorrowBytes& borrow);
  // Appends torch.save(value) as the bytes item `fqn` (a Megatron ShardedObject, param_groups …).
  void write_object(const std::string& fqn, const Value& value);
  // Appends `size` bytes from `fill` unchanged as the bytes item `fqn` (an item carried over from
  // another checkpoint).
  void write_bytes(const std::string& fqn, uint64_t size, const FillBytes& fill);

  uint32_t rank() const { return rank_; }
  const std::string& file_name() const { return file_name_; }  // "__R_0.distcp"
  uint64_t bytes_written() const { return end_; }

 private:
  friend class DcpWriter;
  struct Item {
    size_t key = 0;
    std::optional<std::vector<uint64_t>> offsets, sizes;  // tensor chunks only
    uint64_t offset = 0, length = 0;
  };
  DcpRankWriter(const DcpWriter& owner, uint32_t rank);
  void append(const void* data, size_t size);
  void flush();
  void wrote(uint64_t bytes);  // counts bytes written; starts writeback every kWritebackBytes
  void finish();  // flush, fsync, close
  template <typename WriteItem>
  void write_item(size_t key, Item item, WriteItem write);
  template <typename Bytes>
  void write_tensor_item(const std::string& fqn, const std::vector<uint64_t>& offsets,
                         const std::vector<uint64_t>& sizes, const Bytes& bytes);

  const DcpWriter& owner_;
  uint32_t rank_;
  std::string file_name_, path_;
  int fd_ = -1;
  uint64_t end_ = 0;             // bytes in the file, buffered ones included
  std::vector<uint8_t> buffer_;  // small writes (zip headers), flushed with pwrite
  size_t buffered_ = 0;
  uint64_t unsynced_ = 0;        // bytes written since writeback was last started
  bool broken_ = false;
  std::vector<Item> items_;
};

class DcpWriter {
 public:
  // Creates the staging directory beside `target` (fpg::UsageError if `target` exists or its parent
  // does not).
  explicit DcpWriter(std::string target, DcpWriteOptions opts = {});
  ~DcpWriter();
  DcpWriter(const DcpWriter&) = delete;
  DcpWriter& operator=(const DcpWriter&) = delete;

  // Keys of state_dict_metadata, in this order. fpg::UsageError for a key declared twice, an empty
  // key, a dtype without whole-byte elements, a planner_path whose elements joined by '.' are not
  // `fqn` (torch's flattening joins them so): {"model", "input.weight"} for "model.input.weight".
  void declare_tensor(const std::string& fqn, const TorchDType& dtype, std::vector<uint64_t> shape,
                      std::vector<std::string> planner_path = {});
  void declare_bytes(const std::string& fqn);

  DcpRankWriter& rank(uint32_t r);  // created (with its empty data file) on first use; thread-safe

  // Checks, writes the metadata and publishes the checkpoint; returns the metadata written.
  Metadata commit();

  const std::string& target() const { return target_; }
  const std::string& staging() const { return staging_.path(); }

 private:
  friend class DcpRankWriter;
  struct Key {
    std::string fqn;
    const TorchDType* dtype = nullptr;  // null for a bytes key
    std::vector<uint64_t> shape;
    std::vector<std::string> planner_path;  // empty: (fqn,)
  };
  size_t key_index(const std::string& fqn) const;  // UsageError for an undeclared key
  void declare(Key k);
  Metadata build_metadata() const;

  std::string target_;
  fpckpt::StagingDir staging_;  // locked while the writer lives, so recovery leaves it alone
  DcpWriteOptions opts_;
  std::vector<Key> keys_;
  std::unordered_map<std::string, size_t> by_fqn_;
  std::mutex ranks_mutex_;
  std::vector<std::unique_ptr<DcpRankWriter>> ranks_;
  bool committed_ = false;
};

}  // namespace fpg::dcp
