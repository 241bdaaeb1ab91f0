// Real Megatron-Core torch_dist checkpoints (testdata/megatron, written by megatron-core 0.19.2) read
// per parameter and compared bitwise with the ground truth the generator took from the optimizer.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.h"
#include "formats/dcp/dcp_params.h"
#include "core/error.h"
#include "formats/safetensors/reader.h"
#include "safetensors_test_util.h"

using namespace fpg;

namespace {

std::string fixture(const std::string& name) { return std::string(FPG_TESTDATA_DIR) + "/megatron/" + name; }

void check_against_truth(const std::string& name) {
  INFO(name);
  dcp::Reader reader(fixture(name) + "/ckpt");
  dcp::DcpParams src(reader);
  CHECK(src.megatron());
  safetensors::Reader truth(fixture(name) + "/truth.safetensors");
  REQUIRE(src.tensors().size() == truth.size());
  std::vector<uint8_t> got;
  for (size_t t = 0; t < src.tensors().size(); ++t) {
    const ckpt::ParamTensor& pt = src.tensors()[t];
    INFO(pt.name);
    const auto* want = truth.find(pt.name);
    REQUIRE(want);
    CHECK(pt.dtype == want->dtype);
    CHECK(pt.shape == want->shape);
    got.resize(want->nbytes());
    src.read(t, 0, pt.numel(), got.data());
    CHECK(std::memcmp(got.data(), truth.data(*want), got.size()) == 0);
    // A range inside the tensor reads the same elements.
    if (pt.numel() > 3) {
      const uint64_t elem = want->nbytes() / pt.numel();
      std::vector<uint8_t> part((pt.numel() - 2) * elem);
      src.read(t, 1, pt.numel() - 1, part.data());
      CHECK(std::memcmp(part.data(), truth.data(*want) + elem, part.size()) == 0);
    }
  }
  // The records read in part (the ranges above) are CRC-checked here, their unread bytes read.
  src.finish_reads();
}

}  // namespace

TEST_CASE("Megatron dp_reshardable, one bucket per buffer, equals the optimizer's state", "[dcp][megatron]") {
  check_against_truth("dp1-one-bucket");
  dcp::Reader reader(fixture("dp1-one-bucket") + "/ckpt");
  dcp::DcpParams src(reader);
  CHECK(src.optimizer_form() == dcp::OptimizerForm::dp_reshardable);
  REQUIRE(src.layout());
  CHECK(src.layout()->layout.buffers.size() == 2);
  CHECK(src.unmapped_keys().empty());
  // The 64-element gaps between the fp32 norm weights are stored as data chunks.
  CHECK_FALSE(src.stored_padding().empty());
}

TEST_CASE("Megatron dp_reshardable, several padded buckets, equals the optimizer's state", "[dcp][megatron]") {
  check_against_truth("dp1-buckets-padded");
  dcp::Reader reader(fixture("dp1-buckets-padded") + "/ckpt");
  dcp::DcpParams src(reader);
  REQUIRE(src.layout());
  CHECK(src.layout()->layout.pad_for_nccl);
  CHECK(src.layout()->layout.buffers[0].buckets.size() == 4);
}

TEST_CASE("Megatron fully_reshardable equals the optimizer's state", "[dcp][megatron]") {
  check_against_truth("dp1-fully-reshardable");
  dcp::Reader reader(fixture("dp1-fully-reshardable") + "/ckpt");
  dcp::DcpParams src(reader);
  CHECK(src.optimizer_form() == dcp::OptimizerForm::model_space);
  CHECK_FALSE(src.layout());
}

TEST_CASE("Megatron layer-wise Muon with Adam equals the optimizers' state", "[dcp][megatron]") {
  check_against_truth("dp1-layerwise-muon");
}

TEST_CASE("Megatron reads follow a plan of some tensors in another order, and reads outside it", "[dcp][megatron]") {
  for (const std::string name : {"dp1-one-bucket", "parallel/tp2-dp2-dp_reshardable"}) {
    INFO(name);
    dcp::Reader reader(fixture(name) + "/ckpt");
    dcp::DcpParams src(reader);
    safetensors::Reader truth(fixture(name) + "/truth.safetensors");
    auto check = [&](size_t t, uint64_t lo, uint64_t hi) {
      const ckpt::ParamTensor& pt = src.tensors()[t];
      INFO(pt.name << " [" << lo << ", " << hi << ")");
      const auto* want = truth.find(pt.name);
      REQUIRE(want);
      const uint64_t elem = want->nbytes() / pt.numel();
      std::vector<uint8_t> got((hi - lo) * elem);
      src.read(t, lo, hi, got.data());
      CHECK(std::memcmp(got.data(), truth.data(*want) + lo * elem, got.size()) == 0);
    };
    // The weights alone, last first, each in two halves; ranges that name no tensor's elements are
    // ignored by the plan (and would be refused by read).
    std::vector<ckpt::ParamRange> plan;
    for (size_t t = src.tensors().size(); t-- > 0;)
      if (const uint64_t n = src.tensors()[t].numel(); src.tensors()[t].role == "weight" && n > 1) {
        plan.push_back({t, 0, n / 2});
        plan.push_back({t, n / 2, n});
      }
    REQUIRE(plan.size() >= 4);
    plan.push_back({src.tensors().size() + 5, 0, 1});
    plan.push_back({0, 5, 2});
    src.plan_reads(plan, 1 << 20);
    // The second planned read first, as concurrent reads may start.
    check(plan[1].tensor, plan[1].lo, plan[1].hi);
    check(plan[0].tensor, plan[0].lo, plan[0].hi);
    for (size_t k = 2; k + 2 < plan.size(); ++k) check(plan[k].tensor, plan[k].lo, plan[k].hi);
    // Tensors the plan does not hold.
    for (size_t t = 0; t < src.tensors().size(); ++t)
      if (src.tensors()[t].role != "weight") check(t, 0, src.tensors()[t].numel());
    src.finish_reads();
    // A new pass without a plan reads as before.
    for (size_t t = 0; t < src.tensors().size(); ++t) check(t, 0, src.tensors()[t].numel());
    src.finish_reads();
  }
}

TEST_CASE("Megatron bucket records read in part are CRC-checked, their unread bytes too", "[dcp][megatron]") {
  // A copy of a fixture with one byte of a bucket chunk flipped: the first element of chunk 0 of a
  // state, which a read of each tensor's elements [1, n - 1) never asks for.
  sttest::TempDir tmp;
  const std::string dir = tmp.path() + "/ckpt";
  std::filesystem::copy(fixture("dp1-one-bucket") + "/ckpt", dir, std::filesystem::copy_options::recursive);
  std::string flipped;
  {
    const dcp::Reader reader(dir);
    for (const dcp::Entry& e : reader.metadata().entries) {
      if (!e.is_tensor || e.fqn.find("bucket_idx_0.exp_avg_sq") == std::string::npos) continue;
      std::vector<uint8_t> data(reader.chunk_bytes(e, 0));
      reader.read_chunk(e, 0, data.data(), data.size());
      const dcp::StorageEntry& s = reader.storage(e, 0);
      const std::string path = dir + "/" + s.relative_path;
      std::ifstream in(path, std::ios::binary);
      std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      // The chunk's elements inside its item: where its first 16 bytes are.
      const auto at = std::search(file.begin() + s.offset, file.begin() + s.offset + s.length, data.begin(),
                                  data.begin() + 16);
      REQUIRE(at != file.begin() + s.offset + s.length);
      *at ^= 0x01;
      std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(file.data()),
                                                                  static_cast<std::streamsize>(file.size()));
      flipped = e.fqn;
      break;
    }
  }
  REQUIRE_FALSE(flipped.empty());
  dcp::Reader reader(dir);
  dcp::DcpParams src(reader);
  std::vector<uint8_t> buf;
  for (size_t t = 0; t < src.tensors().size(); ++t) {
    const ckpt::ParamTensor& pt = src.tensors()[t];
    if (pt.numel() < 3) continue;
    buf.resize(pt.numel() * 4);
    src.read(t, 1, pt.numel() - 1, buf.data());
  }
  try {
    src.finish_reads();
    FAIL("the flipped byte went unnoticed");
  } catch (const FormatError& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(flipped) != std::string::npos);
    CHECK(std::string(e.what()).find("CRC-32") != std::string::npos);
  }
}
