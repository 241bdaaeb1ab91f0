// torch.save writer: every tensor item of the committed Megatron-Core checkpoints (written by torch
// 2.11's torch.save) is re-encoded byte for byte; the zip layout (64-byte aligned records, CRCs,
// descriptors, ZIP64 past 4 GiB) read back by the zip reader; objects with tensors inside; a tensor's
// bytes lent in blocks (with their CRCs or without) written as its filled bytes are.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "formats/dcp/byte_source.h"
#include "formats/dcp/zip/crc32.h"
#include "formats/dcp/reader.h"
#include "formats/dcp/torch_save/torch_save.h"
#include "formats/dcp/torch_save/torch_save_writer.h"
#include "formats/dcp/zip/zip_archive.h"
#include "formats/dcp/zip/zip_writer.h"

using namespace fpg;
using namespace fpg::dcp;

namespace {

const std::string kMegatron = std::string(FPG_TESTDATA_DIR) + "/megatron";
const char* const kFixtures[] = {"dp1-one-bucket", "dp1-buckets-padded", "dp1-fully-reshardable", "dp1-layerwise-muon"};

struct StringSink {
  std::string bytes;
  ByteSink sink() {
    return [this](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  }
};

std::string item_bytes(const Reader& r, const StorageEntry& s) {
  std::string b(s.length, '\0');
  r.files().open(s.relative_path)->read(s.offset, b.data(), b.size());
  return b;
}

FillBytes from(const std::vector<uint8_t>& data) {
  return [&data](uint64_t off, void* dst, size_t n) { std::memcpy(dst, data.data() + off, n); };
}

const TorchDType& dt(const char* name) { return *find_torch_dtype(name); }

}  // namespace

TEST_CASE("torch.save writer: Megatron's tensor items re-encoded byte for byte", "[dcp][torch_save_writer]") {
  for (const char* name : kFixtures) {
    CAPTURE(name);
    const Reader r(kMegatron + "/" + name + "/ckpt");
    size_t tensors = 0;
    for (const Entry& e : r.metadata().entries) {
      if (!e.is_tensor) continue;
      for (size_t c = 0; c < e.tensor.chunks.size(); ++c) {
        CAPTURE(e.fqn, c);
        std::vector<uint8_t> data(r.chunk_bytes(e, c));
        r.read_chunk(e, c, data.data(), data.size());
        StringSink out;
        const uint64_t n = write_torch_save_tensor(out.sink(), *e.tensor.dtype, e.tensor.chunks[c].sizes, from(data), 1000);
        CHECK(n == out.bytes.size());
        CHECK(out.bytes == item_bytes(r, r.storage(e, c)));
        ++tensors;
      }
    }
    CHECK(tensors > 20);
  }
}

TEST_CASE("torch.save writer: Megatron's objects re-encoded to the same values", "[dcp][torch_save_writer]") {
  for (const char* name : kFixtures) {
    CAPTURE(name);
    const Reader r(kMegatron + "/" + name + "/ckpt");
    for (const Entry& e : r.metadata().entries) {
      if (e.is_tensor) continue;
      CAPTURE(e.fqn);
      const Value v = r.read_object(e);
      StringSink out;
      write_torch_save_value(out.sink(), v);
      const BufferSource src("rewritten " + e.fqn, reinterpret_cast<const uint8_t*>(out.bytes.data()), out.bytes.size());
      CHECK(TorchSaveArchive(src).to_value().repr(1 << 20) == v.repr(1 << 20));
      // Where CPython's pickle did not share an object between two places (optimizer param groups
      // share their betas tuple; some strings are distinct objects), the bytes are torch's own.
      if (e.fqn.find("_extra_state") != std::string::npos || e.fqn.find("per_bucket_numel") != std::string::npos)
        CHECK(out.bytes == item_bytes(r, r.storage(e)));
    }
  }
}

TEST_CASE("torch.save writer: zip records aligned, CRC-checked, in torch's order", "[dcp][torch_save_writer]") {
  std::vector<uint8_t> data(3 * 5 * 2);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 37 + 11);
  StringSink out;
  write_torch_save_tensor(out.sink(), dt("bfloat16"), {3, 5}, from(data), 7);
  const BufferSource src("t", reinterpret_cast<const uint8_t*>(out.bytes.data()), out.bytes.size());
  const ZipArchive zip(src);
  std::vector<std::string> names;
  for (const ZipEntry& e : zip.entries()) {
    names.push_back(e.name);
    CHECK(e.data_offset % kTorchRecordAlignment == 0);
    zip.read_all(e, 1 << 20);  // checks the CRC-32
  }
  CHECK(names == std::vector<std::string>{"archive/data.pkl", "archive/.format_version", "archive/.storage_alignment",
                                          "archive/byteorder", "archive/data/0", "archive/version",
                                          "archive/.data/serialization_id"});
  CHECK(out.bytes.compare(zip.find("archive/data/0")->data_offset, data.size(),
                          std::string(data.begin(), data.end())) == 0);
  const std::vector<uint8_t> id = zip.read_all(*zip.find("archive/.data/serialization_id"), 64);
  CHECK(id.size() == 40);
  CHECK(std::all_of(id.begin(), id.end(), [](uint8_t c) { return c >= '0' && c <= '9'; }));

  const TorchSaveArchive archive(src);
  const TensorRecord rec = tensor_item_record(archive);
  CHECK(rec.shape == std::vector<uint64_t>{3, 5});
  CHECK(rec.stride == std::vector<uint64_t>{5, 1});
  std::vector<uint8_t> back(rec.nbytes());
  archive.read_tensor(rec, back.data());
  CHECK(back == data);

  // A zero-size tensor: its empty record has no data descriptor, as miniz writes it.
  StringSink empty;
  write_torch_save_tensor(empty.sink(), dt("float32"), {0, 3}, from(data));
  const BufferSource esrc("e", reinterpret_cast<const uint8_t*>(empty.bytes.data()), empty.bytes.size());
  const ZipArchive ezip(esrc);
  const ZipEntry* d0 = ezip.find("archive/data/0");
  REQUIRE(d0);
  CHECK(d0->size == 0);
  CHECK(empty.bytes.compare(d0->data_offset, 4, "PK\x03\x04") == 0);  // the next local header follows at once
}

TEST_CASE("torch.save writer: a tensor's lent blocks give the archive its filled bytes give", "[dcp][torch_save_writer]") {
  std::vector<uint8_t> data(4 * 1000 * 3);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + i / 97);
  for (const size_t block : {size_t{1}, size_t{64}, size_t{1000}, size_t{4097}, data.size(), data.size() * 2}) {
    CAPTURE(block);
    StringSink filled;
    write_torch_save_tensor(filled.sink(), dt("float32"), {1000, 3}, from(data), block);
    for (const bool with_crc : {false, true}) {
      CAPTURE(with_crc);
      std::vector<std::pair<uint64_t, size_t>> asked;
      const BorrowBytes borrow = [&](uint64_t off, size_t n) {
        asked.emplace_back(off, n);
        BorrowedBlock b{data.data() + off, n, std::nullopt};
        if (with_crc) b.crc32 = crc32_update(0, b.data, n);
        return b;
      };
      StringSink lent;
      const uint64_t total = write_torch_save_tensor(lent.sink(), dt("float32"), {1000, 3}, borrow, block);
      CHECK(total == lent.bytes.size());
      CHECK(lent.bytes == filled.bytes);
      // Consecutive blocks of the block size, the last one shorter.
      uint64_t at = 0;
      for (const auto& [off, n] : asked) {
        CHECK(off == at);
        CHECK(n == std::min<uint64_t>(block, data.size() - off));
        at += n;
      }
      CHECK(at == data.size());
    }
  }
  // A lent CRC is written as given: the reader's CRC check refuses a wrong one.
  StringSink bad;
  write_torch_save_tensor(bad.sink(), dt("uint8"), {100}, [&](uint64_t off, size_t n) {
    return BorrowedBlock{data.data() + off, n, crc32_update(0, data.data() + off, n) ^ 1u};
  }, 64);
  const BufferSource src("bad", reinterpret_cast<const uint8_t*>(bad.bytes.data()), bad.bytes.size());
  const ZipArchive zip(src);
  CHECK_THROWS_AS(zip.read_all(*zip.find("archive/data/0"), 1 << 20), FormatError);
  // A block lent short of what was asked is refused.
  StringSink shortened;
  CHECK_THROWS_AS(write_torch_save_tensor(shortened.sink(), dt("uint8"), {100}, [&](uint64_t off, size_t n) {
    return BorrowedBlock{data.data() + off, n - 1, std::nullopt};
  }, 64), InternalError);
}

namespace {

// A torch.save archive of one large tensor, kept in memory except its data: the header records and the
// directory are stored; the data blocks, all of one byte value, are only counted.
class SparseArchive final : public ByteSource {
 public:
  static constexpr uint8_t kFill = 0xA5;
  ByteSink sink() {
    return [this](const void* p, size_t n) {
      if (n >= (size_t{1} << 20)) {
        data_.push_back({size_, n});
      } else {
        stored_[size_].assign(static_cast<const char*>(p), n);
      }
      size_ += n;
    };
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void read(uint64_t offset, void* dst, uint64_t len) const override {
    auto* out = static_cast<uint8_t*>(dst);
    for (uint64_t i = 0; i < len; ++i) out[i] = at(offset + i);
  }

 private:
  uint8_t at(uint64_t pos) const {
    auto it = stored_.upper_bound(pos);
    if (it != stored_.begin()) {
      --it;
      if (pos < it->first + it->second.size()) return static_cast<uint8_t>(it->second[pos - it->first]);
    }
    for (const auto& [off, n] : data_)
      if (pos >= off && pos < off + n) return kFill;
    throw InternalError("sparse archive: byte " + std::to_string(pos) + " was never written");
  }
  std::string name_ = "sparse";
  uint64_t size_ = 0;
  std::map<uint64_t, std::string> stored_;
  std::vector<std::pair<uint64_t, uint64_t>> data_;
};

}  // namespace

TEST_CASE("torch.save writer: ZIP64 for a record of 4 GiB and the records after it", "[dcp][torch_save_writer]") {
  const uint64_t n = (uint64_t{1} << 32) + 100;  // past 0xFFFFFFFF: size and later offsets in ZIP64 fields
  SparseArchive a;
  const uint64_t total = write_torch_save_tensor(a.sink(), dt("uint8"), {n}, [](uint64_t, void* dst, size_t len) {
    std::memset(dst, SparseArchive::kFill, len);
  }, size_t{64} << 20);
  CHECK(total == a.size());
  const ZipArchive zip(a);
  const ZipEntry* data = zip.find("archive/data/0");
  const ZipEntry* version = zip.find("archive/version");
  REQUIRE(data);
  REQUIRE(version);
  CHECK(data->size == n);
  CHECK(data->data_offset % kTorchRecordAlignment == 0);
  CHECK(version->data_offset > n);
  CHECK(version->data_offset % kTorchRecordAlignment == 0);
  const std::vector<uint8_t> v = zip.read_all(*version, 16);
  CHECK(std::string(v.begin(), v.end()) == "3\n");
  // A 24-byte data descriptor with 64-bit sizes follows the large record.
  std::vector<uint8_t> desc(24);
  a.read(data->data_offset + n, desc.data(), desc.size());
  CHECK(std::memcmp(desc.data(), "PK\x07\x08", 4) == 0);
  uint64_t size64 = 0;
  std::memcpy(&size64, desc.data() + 8, 8);
  CHECK(size64 == n);
}

TEST_CASE("torch.save writer: objects holding tensors", "[dcp][torch_save_writer]") {
  auto t1 = std::make_shared<TensorValue>();
  t1->torch_dtype = "float32";
  t1->shape = {};
  t1->data = {0, 0, 0x40, 0x40};  // 3.0
  auto t2 = std::make_shared<TensorValue>();
  t2->torch_dtype = "float8_e4m3fn";
  t2->shape = {2, 2};
  t2->data = {1, 2, 3, 4};
  const Value v = Value::dict({{Value::str("step"), Value::tensor(t1)},
                               {Value::str("fp8"), Value::tensor(t2)},
                               {Value::str("again"), Value::tensor(t1)}});
  StringSink out;
  write_torch_save_value(out.sink(), v);
  const BufferSource src("o", reinterpret_cast<const uint8_t*>(out.bytes.data()), out.bytes.size());
  const TorchSaveArchive archive(src);
  for (const char* rec : {"archive/data/0", "archive/data/1", "archive/data/2"}) CHECK(archive.zip().find(rec));
  CHECK_FALSE(archive.zip().find("archive/data/3"));
  const Value back = archive.to_value();
  REQUIRE(back.find("fp8"));
  const TensorValue& f8 = back.find("fp8")->tensor_value();
  CHECK(f8.torch_dtype == "float8_e4m3fn");
  CHECK(f8.shape == t2->shape);
  CHECK(f8.data == t2->data);
  CHECK(back.find("step")->tensor_value().data == t1->data);

  auto bad = std::make_shared<TensorValue>(*t2);
  bad->data.pop_back();
  StringSink ignored;
  CHECK_THROWS_AS(write_torch_save_value(ignored.sink(), Value::tensor(bad)), UsageError);
}
