#include "formats/dcp/param_writer.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <memory>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_start.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/zip/crc32.h"

namespace fpg::dcp {
namespace {

// Blocks of half a slab read ahead of the one the DCP writer is writing.
constexpr size_t kDcpBlocksReadAhead = 4;

// A plain DCP's key for an exported tensor: "model.NAME" for weights, "optimizer.state.NAME.STATE"
// (the master as "master") for the rest, as a state dict {"model": …, "optimizer": {"state": …}} flattens.
std::string dcp_key(const ckpt::ParamTensor& t, const std::string& exported_name) {
  if (t.role == "other") return t.name;  // state of no parameter: its own key
  if (exported_name == t.param) return "model." + t.param;
  return "optimizer.state." + t.param + "." + t.role;
}

// The key's path in the nested state dict torch's planner flattened it from: ("model", NAME) and
// ("optimizer", "state", NAME, STATE); a state of no parameter is a path of its one key.
std::vector<std::string> dcp_planner_path(const ckpt::ParamTensor& t, const std::string& exported_name) {
  if (t.role == "other") return {t.name};
  if (exported_name == t.param) return {"model", t.param};
  return {"optimizer", "state", t.param, t.role};
}

}  // namespace

uint64_t write_params(const ckpt::ParamSource& src, const std::vector<ckpt::ExportTensor>& tensors, const std::string& dir,
                      const ckpt::ParamWriteOptions& o) {
  // The writer asks for each tensor's bytes in consecutive blocks of its I/O block size, tensor after
  // tensor, and writes each before asking for the next. Those blocks are read, converted and
  // checksummed ahead into a ring of buffers while it does, so a write that waits on the disk does not
  // stop the reading, and the writer writes each from its buffer with its CRC-32 already known; each
  // read spans many source chunks, read in parallel. A source that serves one read at a time is
  // given the whole sequence of reads first (plan_reads), so that the disk reads ahead along it.
  DcpWriteOptions wo;
  wo.io_block_bytes = static_cast<size_t>(std::max<uint64_t>(o.slab_bytes / 2, 1));
  if (!o.checkpoint_id.empty()) wo.checkpoint_id = o.checkpoint_id;
  DcpWriter w(dir, wo);
  for (const ckpt::ExportTensor& t : tensors) {
    const TorchDType* dtype = find_torch_dtype(torch_dtype_name(t.spec.dtype));
    if (!dtype) throw UsageError(t.spec.name + ": dtype " + std::string(dtype_name(t.spec.dtype)) + " has no torch dtype");
    w.declare_tensor(dcp_key(src.tensors()[t.source], t.spec.name), *dtype, t.spec.shape,
                     dcp_planner_path(src.tensors()[t.source], t.spec.name));
  }
  // With `objects`, the source's non-tensor items (a DCP's param_groups, a scheduler's state) too, as
  // stored, under their own keys.
  if (o.objects)
    for (const std::string& name : src.objects()) w.declare_bytes(name);
  uint64_t bytes_read = 0;
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes();
  Progress progress("export", total, o.progress);

  struct Block {
    size_t tensor = SIZE_MAX;
    uint64_t offset = 0, size = 0;  // output bytes
    uint64_t read = 0;              // source bytes read for them
    uint64_t skip = 0;              // bytes of `bytes` before them
    uint32_t crc = 0;               // their CRC-32
    // Source elements covering them; the output elements. Both only grow: shrunk for a short block and
    // grown again, they would be zero-filled again.
    std::vector<uint8_t> in, bytes;
    const uint8_t* data() const { return bytes.data() + skip; }
  };
  auto grow = [](std::vector<uint8_t>& v, uint64_t n) {
    if (v.size() < n) v.resize(n);
  };
  // The source elements [lo, hi) covering output bytes [offset, offset + size) of a tensor.
  auto source_range = [&tensors](size_t tensor, uint64_t offset, uint64_t size) {
    const uint64_t out_elem = std::max<uint64_t>(dtype_bits(tensors[tensor].spec.dtype) / 8, 1);
    return std::pair<uint64_t, uint64_t>{offset / out_elem, (offset + size + out_elem - 1) / out_elem};
  };
  // Reads those elements and leaves the block's bytes at b.data().
  auto read_block = [&src, &tensors, grow, source_range](Block& b) {
    const ckpt::ExportTensor& t = tensors[b.tensor];
    const ckpt::ParamTensor& st = src.tensors()[t.source];
    const uint64_t in_elem = std::max<uint64_t>(dtype_bits(st.dtype) / 8, 1);
    const uint64_t out_elem = std::max<uint64_t>(dtype_bits(t.spec.dtype) / 8, 1);
    const auto [lo, hi] = source_range(b.tensor, b.offset, b.size);
    b.read = (hi - lo) * in_elem;
    b.skip = b.offset % out_elem;  // a block that starts inside an element (never with whole-element block sizes)
    grow(b.bytes, (hi - lo) * out_elem);
    if (st.dtype == t.spec.dtype) {
      src.read(t.source, lo, hi, b.bytes.data());
    } else {
      grow(b.in, b.read);
      src.read(t.source, lo, hi, b.in.data());
      ckpt::convert_elements(b.in.data(), st.dtype, b.bytes.data(), t.spec.dtype, hi - lo);
    }
  };
  struct Want {
    size_t tensor;
    uint64_t offset, size;
  };
  std::vector<Want> expected;  // the blocks the writer will ask for, in order
  for (size_t ti = 0; ti < tensors.size(); ++ti)
    for (uint64_t at = 0, n = tensors[ti].bytes(); at < n; at += wo.io_block_bytes)
      expected.push_back({ti, at, std::min<uint64_t>(wo.io_block_bytes, n - at)});
  {
    std::vector<ckpt::ParamRange> plan;
    for (const Want& e : expected) {
      const auto [lo, hi] = source_range(e.tensor, e.offset, e.size);
      plan.push_back({tensors[e.tensor].source, lo, hi});
    }
    src.plan_reads(std::move(plan), 2 * o.slab_bytes);
  }
  // One buffer is lent to the writer, the others are read ahead.
  std::vector<Block> ring(kDcpBlocksReadAhead + 1);
  // Declared after the buffers they fill: destroyed (waited for) first on an exception. A source that
  // does not serve concurrent reads has each read wait for the read (not the checksum) before it.
  struct Pending {
    std::shared_future<void> read;   // the block's bytes are in its buffer
    AsyncTask<void> ready;           // and checksummed
  };
  std::deque<Pending> reading;  // blocks [next_fill, next_read)
  size_t next_read = 0, next_fill = 0;
  bool lent = false;  // ring[next_fill % ring.size()] is lent to the writer
  auto start_read = [&] {
    if (next_read >= expected.size()) return;
    Block& b = ring[next_read % ring.size()];
    b.tensor = expected[next_read].tensor;  // field by field: the buffers keep their memory
    b.offset = expected[next_read].offset;
    b.size = expected[next_read].size;
    std::shared_future<void> before;
    if (!src.concurrent_reads() && !reading.empty()) before = reading.back().read;
    auto read = std::make_shared<std::promise<void>>();
    Pending p;
    p.read = read->get_future().share();
    p.ready = start_async([&b, before, read, &read_block] {
      try {
        if (before.valid()) before.wait();
        read_block(b);
      } catch (...) {
        read->set_exception(std::current_exception());
        throw;
      }
      read->set_value();
      b.crc = crc32_update(0, b.data(), b.size);
    });
    reading.push_back(std::move(p));
    ++next_read;
  };
  // The writer is done with the lent buffer: it takes the next read.
  auto give_back = [&] {
    if (!lent) return;
    lent = false;
    reading.pop_front();
    ++next_fill;
    start_read();
  };
  while (next_read < std::min(ring.size(), expected.size())) start_read();
  Block cur;  // a block asked for out of the expected order
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const ckpt::ExportTensor& t = tensors[ti];
    const ckpt::ParamTensor& st = src.tensors()[t.source];
    auto borrow = [&](uint64_t offset, size_t size) {
      give_back();  // the writer has written the block it was lent before
      const Block* b = nullptr;
      if (next_fill < expected.size() && expected[next_fill].tensor == ti && expected[next_fill].offset == offset &&
          expected[next_fill].size == size) {
        reading.front().ready.get();
        b = &ring[next_fill % ring.size()];
        lent = true;
      } else {
        cur.tensor = ti;
        cur.offset = offset;
        cur.size = size;
        read_block(cur);
        cur.crc = crc32_update(0, cur.data(), cur.size);
        b = &cur;
      }
      bytes_read += b->read;
      progress.advance(size);
      return BorrowedBlock{b->data(), size, b->crc};
    };
    w.rank(0).write_tensor(dcp_key(st, t.spec.name), std::vector<uint64_t>(t.spec.shape.size(), 0), t.spec.shape,
                           BorrowBytes(borrow));
    give_back();
  }
  while (!reading.empty()) {
    reading.front().ready.wait();
    reading.pop_front();
  }
  if (o.objects)
    for (size_t i = 0; i < src.objects().size(); ++i) {
      const std::vector<uint8_t> item = src.object_bytes(i);
      w.rank(0).write_bytes(src.objects()[i], item.size(), [&item](uint64_t offset, void* dst, size_t size) {
        std::memcpy(dst, item.data() + offset, size);
      });
      bytes_read += item.size();
    }
  src.finish_reads();
  w.commit();
  return bytes_read;
}

}  // namespace fpg::dcp
