// The per-parameter exports stream a checkpoint slab by slab (safetensors) or block by block (DCP),
// reading ahead of the writer; sources that serve concurrent reads (DCP) read two slabs at once. Cut
// into many small slabs, both must write exactly what one slab per tensor writes (for DCP, the same
// data file byte for byte).
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <string>
#include <thread>
#include <vector>

#include "app/convert/checkpoint_params.h"
#include "app/convert/param_export.h"
#include "catch.h"
#include "ckpt_test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_start.h"
#include "formats/dcp/dcp_params.h"
#include "formats/dcp/dcp_writer.h"
#include "formats/dcp/torch_dtype.h"
#include "formats/dcp/reader.h"
#include "formats/safetensors/model.h"

using namespace fpg;

namespace {

// Every tensor of a ParamSource, whole, as bytes.
std::vector<std::vector<uint8_t>> all_tensors(const ckpt::ParamSource& src) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t t = 0; t < src.tensors().size(); ++t) {
    const ckpt::ParamTensor& p = src.tensors()[t];
    std::vector<uint8_t> bytes(dtype_bytes(p.dtype, p.numel()));
    src.read(t, 0, p.numel(), bytes.data());
    out.push_back(std::move(bytes));
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A source that counts the elements read of each tensor.
class CountingSource : public ckpt::ParamSource {
 public:
  explicit CountingSource(const ckpt::ParamSource& s) : s_(s), read_(s.tensors().size()) {}
  std::string describe() const override { return s_.describe(); }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return s_.tensors(); }
  void read(size_t t, uint64_t lo, uint64_t hi, void* out) const override {
    read_.at(t) += hi - lo;
    s_.read(t, lo, hi, out);
  }
  bool concurrent_reads() const override { return s_.concurrent_reads(); }
  void plan_reads(std::vector<ckpt::ParamRange> reads, uint64_t window) const override {
    s_.plan_reads(std::move(reads), window);
  }
  void finish_reads() const override { s_.finish_reads(); }
  uint64_t elements_read(size_t t) const { return read_.at(t); }

 private:
  const ckpt::ParamSource& s_;
  mutable std::vector<std::atomic<uint64_t>> read_;
};

// One fp32 tensor whose reads fail: the first slab's late, a later slab's at once.
class FailingSource : public ckpt::ParamSource {
 public:
  explicit FailingSource(bool concurrent) : concurrent_(concurrent) {
    ckpt::ParamTensor t;
    t.name = t.param = "w";
    t.role = "weight";
    t.shape = {1024};
    tensors_.push_back(t);
  }
  std::string describe() const override { return "a failing source"; }
  const std::vector<ckpt::ParamTensor>& tensors() const override { return tensors_; }
  void read(size_t, uint64_t lo, uint64_t, void*) const override {
    if (lo == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      throw std::runtime_error("the first slab is wrong");
    }
    throw std::runtime_error("a later slab is wrong");
  }
  bool concurrent_reads() const override { return concurrent_; }

 private:
  bool concurrent_;
  std::vector<ckpt::ParamTensor> tensors_;
};

}  // namespace

TEST_CASE("an export reports the error of the first slab in file order, whichever lane fails first", "[export]") {
  for (const bool concurrent : {true, false}) {
    INFO("concurrent reads: " << concurrent);
    const FailingSource src(concurrent);
    test::CkptTempDir tmp("fpg-param-export");
    app::convert::ExportOptions o;
    o.progress = false;
    o.slab_bytes = 256;  // 16 slabs of 64 elements
    CHECK_THROWS_WITH(app::convert::export_params(src, tmp.path + "/out.safetensors", o), "the first slab is wrong");
  }
}

TEST_CASE("an export refused threads runs on the lanes it got, and fails with exit 3 with none", "[export]") {
  // A TP 2 x PP 2 checkpoint too: its tensors are read in pieces, on threads of their own when the
  // system gives them, on the lane's otherwise.
  const std::string ckpt = std::string(FPG_TESTDATA_DIR) +
                           GENERATE(as<std::string>{}, "/megatron/dp1-buckets-padded/ckpt",
                                    "/megatron/parallel/tp2pp2-dp1-dp_reshardable/ckpt");
  INFO(ckpt);
  const auto opened = app::convert::open_params(ckpt, "export it");
  test::CkptTempDir tmp("fpg-param-export");
  app::convert::ExportOptions o;
  o.progress = false;
  o.slab_bytes = 1002;  // many units
  const app::convert::ExportSummary all = app::convert::export_params(opened->params(), tmp.path + "/all.safetensors", o);
  for (const int allowed : {1, 0}) {
    INFO("threads allowed: " << allowed);
    std::atomic<int> started{0};
    const ThreadStarter previous = set_thread_starter([&](std::function<void()> fn) {
      if (started++ >= allowed) throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      return std::thread(std::move(fn));
    });
    const std::string out = tmp.path + "/refused" + std::to_string(allowed) + ".safetensors";
    if (allowed) {
      CHECK(app::convert::export_params(opened->params(), out, o).bytes_read == all.bytes_read);
      CHECK(file_bytes(out) == file_bytes(tmp.path + "/all.safetensors"));
    } else {
      try {
        app::convert::export_params(opened->params(), out, o);
        FAIL("exported without a thread");
      } catch (const Error& e) {
        CHECK(e.code() == ExitCode::io);
        CHECK(std::string(e.what()).find("the system refused a thread for the export's reads and writes") != std::string::npos);
      }
    }
    set_thread_starter(previous);
  }
}

TEST_CASE("an fp32 export with states reads each master once and writes it as the weight and as NAME.master", "[export]") {
  const auto opened = app::convert::open_params(std::string(FPG_TESTDATA_DIR) + "/megatron/dp1-buckets-padded/ckpt", "export it");
  const CountingSource src(opened->params());
  test::CkptTempDir tmp("fpg-param-export");
  app::convert::ExportOptions o;
  o.weights = app::convert::ExportWeights::fp32;
  o.states = true;
  o.progress = false;
  o.slab_bytes = 1002;
  o.max_shard_bytes = 4096;  // shards: a weight and its master in distinct files
  const app::convert::ExportSummary sum = app::convert::export_params(src, tmp.path + "/out.json", o);
  REQUIRE(sum.files.size() > 2);
  uint64_t bytes = 0, masters = 0;
  for (size_t t = 0; t < src.tensors().size(); ++t) {
    const ckpt::ParamTensor& p = src.tensors()[t];
    INFO(p.name);
    // Every tensor but the bf16 weights (the fp32 export takes the masters) is read whole, once.
    CHECK(src.elements_read(t) == (p.role == "weight" ? 0 : p.numel()));
    bytes += dtype_bytes(p.dtype, src.elements_read(t));
    masters += p.role == "master";
  }
  REQUIRE(masters > 2);
  CHECK(sum.bytes_read == bytes);
  const auto out = safetensors::Model::open(tmp.path + "/out.json");
  size_t apart = 0;
  for (const ckpt::ParamTensor& p : src.tensors())
    if (p.role == "master") {
      INFO(p.param);
      const auto& w = out.tensor(p.param);
      const auto& m = out.tensor(p.param + ".master");
      REQUIRE(w.info->dtype == DType::F32);
      REQUIRE(w.info->nbytes() == m.info->nbytes());
      CHECK(std::memcmp(out.data(w), out.data(m), w.info->nbytes()) == 0);
      apart += w.shard != m.shard;
    }
  CHECK(apart > 0);
}

TEST_CASE("per-parameter exports cut into many slabs write what one slab per tensor writes", "[export]") {
  const std::string sources[] = {std::string(FPG_TESTDATA_DIR) + "/ckpt/valid/dp2-bucket",
                                 std::string(FPG_TESTDATA_DIR) + "/megatron/dp1-buckets-padded/ckpt"};
  for (const std::string& path : sources)
    for (const auto weights : {app::convert::ExportWeights::fp32, app::convert::ExportWeights::bf16}) {
      const bool fp32 = weights == app::convert::ExportWeights::fp32;
      SECTION(path + (fp32 ? " fp32" : " bf16")) {
        const auto opened = app::convert::open_params(path, "export it");
        const ckpt::ParamSource& src = opened->params();
        test::CkptTempDir tmp("fpg-param-export");
        app::convert::ExportOptions whole, sliced;
        whole.weights = sliced.weights = weights;
        whole.states = sliced.states = true;
        whole.progress = sliced.progress = false;
        whole.slab_bytes = uint64_t{1} << 30;
        sliced.slab_bytes = 1002;  // not a multiple of 8 bytes; DCP blocks of 501 bytes start and end inside elements

        app::convert::export_params(src, tmp.path + "/whole.safetensors", whole);
        app::convert::export_params(src, tmp.path + "/sliced.safetensors", sliced);
        const auto a = safetensors::Model::open(tmp.path + "/whole.safetensors");
        const auto b = safetensors::Model::open(tmp.path + "/sliced.safetensors");
        REQUIRE(a.size() == b.size());
        REQUIRE(a.size() > 4);
        for (const auto& ea : a.tensors()) {
          const std::string& name = ea.info->name;
          INFO(name);
          const auto& eb = b.tensor(name);
          REQUIRE(ea.info->dtype == eb.info->dtype);
          REQUIRE(ea.info->nbytes() == eb.info->nbytes());
          REQUIRE(std::memcmp(a.data(ea), b.data(eb), ea.info->nbytes()) == 0);
        }

        app::convert::export_params_dcp(src, tmp.path + "/whole-dcp", whole);
        app::convert::export_params_dcp(src, tmp.path + "/sliced-dcp", sliced);
        const dcp::Reader ra(tmp.path + "/whole-dcp"), rb(tmp.path + "/sliced-dcp");
        const dcp::DcpParams pa(ra), pb(rb);
        REQUIRE(pa.tensors().size() == pb.tensors().size());
        REQUIRE(pa.tensors().size() == a.size());
        REQUIRE(all_tensors(pa) == all_tensors(pb));
        // Byte for byte the same data file: blocks checksummed apart give each record the whole's CRC-32.
        REQUIRE(file_bytes(tmp.path + "/whole-dcp/__0_0.distcp") == file_bytes(tmp.path + "/sliced-dcp/__0_0.distcp"));
        // And the DCP export holds the safetensors export's bytes.
        for (size_t t = 0; t < pa.tensors().size(); ++t) {
          const ckpt::ParamTensor& p = pa.tensors()[t];
          const std::string name = p.role == "weight" ? p.param : p.param + "." + p.role;
          INFO(name);
          const auto& e = a.tensor(name);
          std::vector<uint8_t> bytes(e.info->nbytes());
          pa.read(t, 0, p.numel(), bytes.data());
          REQUIRE(std::memcmp(bytes.data(), a.data(e), bytes.size()) == 0);
        }
      }
    }
}

TEST_CASE("per-parameter exports of a checkpoint with fewer slabs than they read ahead", "[export]") {
  // One F32 tensor of 3 elements: one slab, one DCP block, fewer than either export reads ahead.
  test::CkptTempDir tmp("fpg-param-export");
  const float values[3] = {1.5f, -2.25f, 3.0f};
  {
    dcp::DcpWriter w(tmp.path + "/src");
    w.declare_tensor("model.w", *dcp::find_torch_dtype("float32"), {3});
    w.rank(0).write_tensor("model.w", {0}, {3}, [&](uint64_t offset, void* dst, size_t size) {
      std::memcpy(dst, reinterpret_cast<const uint8_t*>(values) + offset, size);
    });
    w.commit();
  }
  const auto opened = app::convert::open_params(tmp.path + "/src", "export it");
  app::convert::ExportOptions o;
  o.weights = app::convert::ExportWeights::fp32;
  app::convert::export_params(opened->params(), tmp.path + "/out.safetensors", o);
  const auto m = safetensors::Model::open(tmp.path + "/out.safetensors");
  REQUIRE(m.size() == 1);
  REQUIRE(std::memcmp(m.data(m.tensors()[0]), values, sizeof values) == 0);
  app::convert::export_params_dcp(opened->params(), tmp.path + "/out-dcp", o);
  const dcp::Reader r(tmp.path + "/out-dcp");
  const dcp::DcpParams p(r);
  REQUIRE(all_tensors(p) == std::vector<std::vector<uint8_t>>{
                               std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(values),
                                                    reinterpret_cast<const uint8_t*>(values) + sizeof values)});
}
