#include "formats/dcp/dcp_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"
#include "core/shape.h"
#include "formats/dcp/metadata/box_coverage.h"
#include "formats/dcp/metadata/metadata_writer.h"
#include "formats/fpckpt/commit.h"

namespace fpg::dcp {
namespace {

using fs::join_path;

constexpr size_t kSmallWriteBuffer = size_t{1} << 20;
// Writeback is started every this many bytes written, so the disk writes while the caller reads;
// otherwise a large file would reach the disk only at finish()'s fsync, after all the reading.
constexpr uint64_t kWritebackBytes = uint64_t{64} << 20;
constexpr const char* kVersion = "1.0.0";  // torch.distributed.checkpoint.metadata version

std::string quote_json(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', true); }

std::string uuid4() {
  std::random_device rd;
  uint8_t b[16];
  for (int i = 0; i < 16; i += 4) {
    const uint32_t r = rd();
    std::memcpy(b + i, &r, 4);
  }
  b[6] = static_cast<uint8_t>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<uint8_t>((b[8] & 0x3F) | 0x80);
  char s[37];
  std::snprintf(s, sizeof s, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

std::string chunk_string(const ChunkMeta& c) {
  return "offsets " + shape_string(c.offsets) + " sizes " + shape_string(c.sizes);
}

// The chunks must tile the tensor: no overlap, no gap (box_coverage.h). Where the sweep gives up on an
// adversarial layout, DCP's own rule remains: chunk volumes summing to the tensor's numel.
void check_exact_cover(const std::string& fqn, const std::vector<uint64_t>& shape, const std::vector<ChunkMeta>& chunks) {
  if (chunks.empty()) throw UsageError("DCP write: tensor " + fqn + " has no chunks");
  std::vector<Box> boxes;
  boxes.reserve(chunks.size());
  for (const ChunkMeta& c : chunks) boxes.push_back({c.offsets, c.sizes});
  const CoverageResult cover = check_box_coverage(shape, boxes, 1);
  const std::string where = "DCP write: tensor " + fqn + " " + shape_string(shape) + ": ";
  if (!cover.issues.empty()) {
    const CoverageIssue& i = cover.issues.front();
    const std::string box = "offsets " + shape_string(i.box.offsets) + " sizes " + shape_string(i.box.sizes);
    if (i.kind == CoverageIssue::Kind::overlap)
      throw UsageError(where + "chunks " + chunk_string(chunks[i.a]) + " and " + chunk_string(chunks[i.b]) +
                       " overlap at " + box);
    throw UsageError(where + "no chunk covers " + box);
  }
  if (cover.budget_exceeded) {
    uint64_t numel = 1, covered = 0;
    for (const uint64_t d : shape) numel *= d;  // checked when the tensor was declared
    for (const ChunkMeta& c : chunks) {
      uint64_t v = 1;
      for (const uint64_t s : c.sizes) v *= s;  // inside the tensor, so v <= numel < 2^62
      covered = std::min(covered + v, numel + 1);
    }
    if (covered != numel)
      throw UsageError(where + "its chunks hold " + std::to_string(covered) + " elements, not " + std::to_string(numel));
  }
}

}  // namespace

MegatronMetadata megatron_torch_dist_metadata() {
  MegatronMetadata m;
  m.sharded_backend = "torch_dist";
  m.sharded_backend_version = 1;
  return m;
}

std::string megatron_metadata_json(const MegatronMetadata& m) {
  std::string out = "{\"sharded_backend\": " + quote_json(m.sharded_backend);
  if (m.sharded_backend_version) out += ", \"sharded_backend_version\": " + std::to_string(*m.sharded_backend_version);
  if (m.common_backend) out += ", \"common_backend\": " + quote_json(*m.common_backend);
  if (m.common_backend_version) out += ", \"common_backend_version\": " + std::to_string(*m.common_backend_version);
  for (const auto& [k, v] : m.other) out += ", " + quote_json(k) + ": " + v;
  return out + "}";
}

// ---- DcpRankWriter -------------------------------------------------------------------------------

DcpRankWriter::DcpRankWriter(const DcpWriter& owner, uint32_t rank)
    : owner_(owner), rank_(rank), file_name_("__" + std::to_string(rank) + "_0.distcp"),
      path_(join_path(owner.staging_.path(), file_name_)) {
  fd_ = fs::create_file(path_, 0644);
}

DcpRankWriter::~DcpRankWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DcpRankWriter::flush() {
  if (buffered_ == 0) return;
  fs::pwrite_all(fd_, path_, end_ - buffered_, buffer_.data(), buffered_);
  wrote(buffered_);
  buffered_ = 0;
}

void DcpRankWriter::wrote(uint64_t bytes) {
  unsynced_ += bytes;
  if (unsynced_ < kWritebackBytes) return;
  fs::start_writeback(fd_);
  unsynced_ = 0;
}

// Headers and pickles gather in the buffer; writes of its size or more (data blocks) go straight to the file.
void DcpRankWriter::append(const void* data, size_t size) {
  if (size >= kSmallWriteBuffer) {
    flush();
    fs::pwrite_all(fd_, path_, end_, data, size);
    wrote(size);
  } else {
    if (buffer_.empty()) buffer_.resize(kSmallWriteBuffer);
    if (buffered_ + size > buffer_.size()) flush();
    std::memcpy(buffer_.data() + buffered_, data, size);
    buffered_ += size;
  }
  end_ += size;
}

void DcpRankWriter::finish() {
  if (fd_ < 0) return;
  flush();
  fs::fsync_fd(fd_, path_);
  const int fd = fd_;
  fd_ = -1;
  fs::close_fd(fd, path_);
}

template <typename WriteItem>
void DcpRankWriter::write_item(size_t key, Item item, WriteItem write) {
  if (broken_)
    throw UsageError("DCP write: rank " + std::to_string(rank_) + " takes no more items after a failed one");
  if (fd_ < 0) throw InternalError("DCP write: rank " + std::to_string(rank_) + " written after commit");
  item.key = key;
  item.offset = end_;
  try {
    const ByteSink sink = [this](const void* p, size_t n) { append(p, n); };
    write(sink);
  } catch (...) {
    broken_ = true;
    throw;
  }
  item.length = end_ - item.offset;
  items_.push_back(std::move(item));
}

template <typename Bytes>
void DcpRankWriter::write_tensor_item(const std::string& fqn, const std::vector<uint64_t>& offsets,
                                      const std::vector<uint64_t>& sizes, const Bytes& bytes) {
  const size_t key = owner_.key_index(fqn);
  const DcpWriter::Key& k = owner_.keys_[key];
  if (!k.dtype) throw UsageError("DCP write: " + fqn + " is a bytes key, not a tensor");
  if (offsets.size() != k.shape.size() || sizes.size() != k.shape.size())
    throw UsageError("DCP write: " + fqn + " " + shape_string(k.shape) + ": chunk offsets " + shape_string(offsets) +
                     " and sizes " + shape_string(sizes) + " must have one entry per dimension");
  for (size_t d = 0; d < k.shape.size(); ++d)
    if (sizes[d] > k.shape[d] || offsets[d] > k.shape[d] - sizes[d])
      throw UsageError("DCP write: " + fqn + " " + shape_string(k.shape) + ": chunk at offsets " +
                       shape_string(offsets) + " with sizes " + shape_string(sizes) + " reaches outside the tensor");
  Item item;
  item.offsets = offsets;
  item.sizes = sizes;
  const size_t block = owner_.opts_.io_block_bytes;
  write_item(key, std::move(item), [&](const ByteSink& sink) { write_torch_save_tensor(sink, *k.dtype, sizes, bytes, block); });
}

void DcpRankWriter::write_tensor(const std::string& fqn, const std::vector<uint64_t>& offsets,
                                 const std::vector<uint64_t>& sizes, const FillBytes& fill) {
  write_tensor_item(fqn, offsets, sizes, fill);
}

void DcpRankWriter::write_tensor(const std::string& fqn, const std::vector<uint64_t>& offsets,
                                 const std::vector<uint64_t>& sizes, const BorrowBytes& borrow) {
  write_tensor_item(fqn, offsets, sizes, borrow);
}

void DcpRankWriter::write_object(const std::string& fqn, const Value& value) {
  const size_t key = owner_.key_index(fqn);
  if (owner_.keys_[key].dtype) throw UsageError("DCP write: " + fqn + " is a tensor key, not a bytes key");
  write_item(key, Item{}, [&](const ByteSink& sink) { write_torch_save_value(sink, value); });
}

void DcpRankWriter::write_bytes(const std::string& fqn, uint64_t size, const FillBytes& fill) {
  const size_t key = owner_.key_index(fqn);
  if (owner_.keys_[key].dtype) throw UsageError("DCP write: " + fqn + " is a tensor key, not a bytes key");
  write_item(key, Item{}, [&](const ByteSink& sink) {
    std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(owner_.opts_.io_block_bytes, size)));
    for (uint64_t off = 0; off < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - off));
      fill(off, buf.data(), n);
      sink(buf.data(), n);
      off += n;
    }
  });
}

// ---- DcpWriter -----------------------------------------------------------------------------------

DcpWriter::DcpWriter(std::string target, DcpWriteOptions opts) : target_(std::move(target)), opts_(std::move(opts)) {
  while (target_.size() > 1 && target_.back() == '/') target_.pop_back();
  if (opts_.io_block_bytes == 0) throw UsageError("DCP write: the I/O block size must be positive");
  staging_ = fpckpt::begin_staging(target_);
}

DcpWriter::~DcpWriter() {
  if (!committed_) {
    ranks_.clear();
    fs::remove_tree(staging_.path());
  }
}

void DcpWriter::declare(Key k) {
  if (k.fqn.empty()) throw UsageError("DCP write: an empty key");
  if (by_fqn_.count(k.fqn)) throw UsageError("DCP write: key " + k.fqn + " declared twice");
  by_fqn_.emplace(k.fqn, keys_.size());
  keys_.push_back(std::move(k));
}

void DcpWriter::declare_tensor(const std::string& fqn, const TorchDType& dtype, std::vector<uint64_t> shape,
                               std::vector<std::string> planner_path) {
  if (!planner_path.empty()) {
    std::string joined;
    for (size_t i = 0; i < planner_path.size(); ++i) joined += (i ? "." : "") + planner_path[i];
    if (joined != fqn)
      throw UsageError("DCP write: " + fqn + ": planner path " + joined + " does not flatten to the key");
  }
  if (dtype.element_bytes == 0)
    throw UsageError("DCP write: " + fqn + ": dtype " + std::string(dtype.name) + " has no whole-byte elements");
  uint64_t numel = 1;
  for (const uint64_t d : shape) {
    if (d != 0 && numel > (uint64_t{1} << 62) / d / dtype.element_bytes)
      throw UsageError("DCP write: " + fqn + ": shape " + shape_string(shape) + " is too large");
    numel *= d;
  }
  declare({fqn, &dtype, std::move(shape), std::move(planner_path)});
}

void DcpWriter::declare_bytes(const std::string& fqn) { declare({fqn, nullptr, {}, {}}); }

size_t DcpWriter::key_index(const std::string& fqn) const {
  const auto it = by_fqn_.find(fqn);
  if (it == by_fqn_.end()) throw UsageError("DCP write: key " + fqn + " was not declared");
  return it->second;
}

DcpRankWriter& DcpWriter::rank(uint32_t r) {
  std::lock_guard<std::mutex> lock(ranks_mutex_);
  if (committed_) throw InternalError("DCP write: rank() after commit()");
  if (r >= ranks_.size()) ranks_.resize(r + 1);
  if (!ranks_[r]) ranks_[r].reset(new DcpRankWriter(*this, r));
  return *ranks_[r];
}

Metadata DcpWriter::build_metadata() const {
  Metadata md;
  md.file = join_path(target_, ".metadata");
  md.entries.resize(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) {
    Entry& e = md.entries[i];
    e.fqn = keys_[i].fqn;
    e.is_tensor = keys_[i].dtype != nullptr;
    if (e.is_tensor) {
      e.tensor.dtype = keys_[i].dtype;
      e.tensor.size = keys_[i].shape;
    }
    if (opts_.planner_data)
      md.planner_data.push_back(
          {e.fqn, keys_[i].planner_path.empty() ? std::vector<std::string>{e.fqn} : keys_[i].planner_path});
  }
  std::vector<uint64_t> bytes_items(keys_.size(), 0);
  for (const auto& rank : ranks_) {
    if (!rank) continue;
    for (const DcpRankWriter::Item& item : rank->items_) {
      const int64_t storage = static_cast<int64_t>(md.storage.size());
      StorageEntry s;
      s.fqn = keys_[item.key].fqn;
      s.chunk_offsets = item.offsets;
      s.relative_path = rank->file_name_;
      s.offset = item.offset;
      s.length = item.length;
      md.storage.push_back(std::move(s));
      Entry& e = md.entries[item.key];
      if (e.is_tensor) e.tensor.chunks.push_back({*item.offsets, *item.sizes, storage});
      else e.storage = storage, ++bytes_items[item.key];
    }
  }
  for (size_t i = 0; i < keys_.size(); ++i) {
    const Entry& e = md.entries[i];
    if (e.is_tensor) check_exact_cover(e.fqn, e.tensor.size, e.tensor.chunks);
    else if (bytes_items[i] != 1)
      throw UsageError("DCP write: bytes key " + e.fqn + " written " + std::to_string(bytes_items[i]) +
                       " times; it must be written once");
  }
  md.version = kVersion;
  StorageMetaInfo sm;
  sm.checkpoint_id = opts_.checkpoint_id ? *opts_.checkpoint_id : target_;
  sm.save_id = uuid4();
  md.storage_meta = std::move(sm);
  return md;
}

Metadata DcpWriter::commit() {
  std::lock_guard<std::mutex> lock(ranks_mutex_);
  if (committed_) throw InternalError("DCP write: commit() called twice");
  for (const auto& rank : ranks_) {
    if (!rank) continue;
    if (rank->broken_)
      throw UsageError("DCP write: rank " + std::to_string(rank->rank_) + " failed to write an item; not committed");
    rank->finish();
  }
  Metadata md = build_metadata();
  fs::write_file_atomic(join_path(staging_.path(), ".metadata"), metadata_pickle(md));
  if (opts_.megatron)
    fs::write_file_atomic(join_path(staging_.path(), "metadata.json"), megatron_metadata_json(*opts_.megatron));
  fpckpt::publish_staging(staging_.path(), target_);
  committed_ = true;
  return md;
}

}  // namespace fpg::dcp
