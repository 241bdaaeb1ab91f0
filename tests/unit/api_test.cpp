// The public C++ API (lib/include/fpgather) on the checkpoint fixtures of testdata/ and on values
// worked by hand: each entry point gives what the command it stands for gives, and every failure is
// an fpgather::Error of the command's exit code.
#include <fpgather/fpgather.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "app/checkpoint/checkpointing.h"
#include "catch.h"
#include "fp8/quantize.h"
#include "optim/adam.h"
#include "optim/muon.h"
#include "unit/ckpt_test_util.h"
#include "unit/pipeline_test_util.h"

namespace {

const std::string kData = FPG_TESTDATA_DIR;
const std::string kValid = kData + "/ckpt/valid";

// The kind of the fpgather::Error `f` throws; fails the test when it throws none.
template <class F>
fpgather::ErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const fpgather::Error& e) {
    return e.kind();
  }
  FAIL("no fpgather::Error thrown");
  return fpgather::ErrorKind::internal;
}

const fpgather::TensorSummary* find_tensor(const fpgather::CheckpointSummary& s, const std::string& name) {
  for (const auto& t : s.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// A checkpoint of two steps of a DP-2 run of the test network (AdamW, bucketed), in `root`.
std::string save_training_checkpoint(const std::string& root) {
  fpg::app::train::TrainOptions o;
  o.spec = fpg::pipeline::test::spec32();
  o.dp = 2;
  o.accumulation = 2;
  o.steps = 2;
  o.micro_batch = 2;
  fpg::app::checkpoint::CheckpointOptions k;
  k.save = root;
  fpg::app::checkpoint::train_with_checkpoints(o, k);
  return root;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("api: open and inspect an fpgather checkpoint", "[api]") {
  const auto c = fpgather::Checkpoint::open(kValid + "/dp2-bucket");
  CHECK(c.format() == fpgather::CheckpointFormat::fpgather);
  CHECK(std::string(fpgather::format_name(c.format())) == "fpgather");
  const auto s = c.inspect();
  CHECK(s.format_version == "2.0");
  CHECK(s.producer == "fpgather 0.1.0");
  REQUIRE(s.step);
  CHECK(*s.step == 7);
  REQUIRE(s.dp);
  CHECK(*s.dp == 2);
  CHECK(s.layout == "bucketed, dp 2");
  CHECK(s.optimizer == "adamw, state layout bucket");
  CHECK(s.fp8 == "tensorwise");
  CHECK(s.files == 2);
  CHECK(s.bytes == 2414);
  CHECK(s.stored_bytes == 2393);
  REQUIRE(s.tensors.size() == 7);
  const auto* w = find_tensor(s, "weight/blocks.0.w");
  REQUIRE(w);
  CHECK(w->kind == "weight");
  CHECK(w->dtype == "BF16");
  CHECK(w->shape == std::vector<uint64_t>{10, 10});
  CHECK(w->numel == 100);
  CHECK(w->bytes == 200);
  const auto* m = find_tensor(s, "optimizer/buffer0/bucket0/master");
  REQUIRE(m);
  CHECK(m->kind == "master");
  CHECK(m->chunks == 4);
  CHECK(m->bytes == 660);  // 228 elements, 63 of them declared padding
  uint64_t bytes = 0;
  for (const auto& t : s.tensors) bytes += t.bytes;
  CHECK(bytes == s.bytes);
}

TEST_CASE("api: open resolves latest and refuses what is no checkpoint", "[api]") {
  const auto c = fpgather::Checkpoint::open(kValid + "/run");
  CHECK(c.path() != kValid + "/run");
  CHECK(c.path().rfind(kValid + "/run/", 0) == 0);
  CHECK(c.validate().valid);
  CHECK(error_kind_of([] { fpgather::Checkpoint::open(kData + "/safetensors"); }) == fpgather::ErrorKind::format);
  CHECK(error_kind_of([] { fpgather::Checkpoint::open(kData + "/no-such-dir"); }) == fpgather::ErrorKind::format);
}

TEST_CASE("api: validate reports problems as fpgather validate prints them", "[api]") {
  const auto ok = fpgather::Checkpoint::open(kValid + "/dp2-bucket").validate();
  CHECK(ok.valid);
  CHECK(ok.readable);
  CHECK(ok.layout_checked);
  CHECK(ok.tensors == 7);
  CHECK(ok.problems.empty());

  const auto gap = fpgather::Checkpoint::open(kData + "/ckpt/broken/gap").validate();
  CHECK_FALSE(gap.valid);
  REQUIRE(gap.problems.size() == 1);
  const auto& p = gap.problems[0];
  CHECK(p.kind == "gap");
  CHECK(p.tensor == "optimizer/buffer0/bucket0/exp_avg");
  CHECK(p.lo == 128);
  CHECK(p.hi == 160);
  CHECK(p.text == "gap optimizer/buffer0/bucket0/exp_avg [128, 160) -: not covered by data or declared padding");

  // A flipped bit is found only when the chunks are read.
  const auto flipped = fpgather::Checkpoint::open(kData + "/ckpt/broken/flipped-bit");
  CHECK(flipped.validate().valid);
  fpgather::ValidateOptions data;
  data.data = true;
  const auto read = flipped.validate(data);
  CHECK_FALSE(read.valid);
  CHECK(read.data_checked);
  CHECK(read.chunks_read == 27);
  REQUIRE(read.problems.size() == 1);
  CHECK(read.problems[0].kind == "checksum");
  CHECK(read.problems[0].file == "rank-00002.h5");

  const auto newer = fpgather::Checkpoint::open(kData + "/ckpt/broken/newer-version").validate();
  CHECK_FALSE(newer.readable);
  CHECK_FALSE(newer.valid);
  REQUIRE(newer.problems.size() == 1);
  CHECK(newer.problems[0].kind == "version");
}

TEST_CASE("api: diff compares in model space and refuses invalid checkpoints", "[api]") {
  const auto a = fpgather::Checkpoint::open(kValid + "/dp4-model");
  const auto rep = fpgather::diff(a, fpgather::Checkpoint::open(kValid + "/dp4-model-perturbed"));
  CHECK_FALSE(rep.equal);
  CHECK(rep.tensors_compared == 10);
  CHECK(rep.elements_compared == 761);
  REQUIRE(rep.differences.size() == 1);
  const auto& d = rep.differences[0];
  CHECK(d.tensor == "optimizer/blocks.0.w/exp_avg");
  CHECK(d.what == "values");
  CHECK(d.differing == 1);
  CHECK(d.lo == 42);
  CHECK(d.hi == 43);
  CHECK(d.max_abs_diff == Approx(0.5).epsilon(1e-6));
  REQUIRE(d.first.size() == 1);
  CHECK(d.first[0].index == 42);

  fpgather::DiffOptions loose;
  loose.atol = 0.5;
  CHECK(fpgather::diff(a, fpgather::Checkpoint::open(kValid + "/dp4-model-perturbed"), loose).equal);
  // The same state at another DP size.
  CHECK(fpgather::diff(fpgather::Checkpoint::open(kValid + "/dp2-model"), a).equal);
  // A DCP's param_groups compared by content; left out by a glob.
  const auto ts = fpgather::Checkpoint::open(kData + "/dcp/train_state");
  const auto lr = fpgather::Checkpoint::open(kData + "/dcp/train_state_lr");
  const auto lr_diff = fpgather::diff(ts, lr);
  REQUIRE(lr_diff.differences.size() == 1);
  CHECK(lr_diff.differences[0].tensor == "optim.param_groups.0.lr");
  CHECK(lr_diff.differences[0].what == "value");
  fpgather::DiffOptions ignoring;
  ignoring.ignore = {"optim.param_groups.*"};
  CHECK(fpgather::diff(ts, lr, ignoring).equal);

  const auto gap = fpgather::Checkpoint::open(kData + "/ckpt/broken/gap");
  CHECK(error_kind_of([&] { fpgather::diff(gap, gap); }) == fpgather::ErrorKind::check_failed);
  loose.rtol = -1;
  CHECK(error_kind_of([&] { fpgather::diff(a, a, loose); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: a Megatron torch_dist checkpoint", "[api]") {
  const auto c = fpgather::Checkpoint::open(kData + "/megatron/dp1-buckets-padded/ckpt");
  CHECK(c.format() == fpgather::CheckpointFormat::megatron_torch_dist);
  const auto s = c.inspect();
  CHECK(s.format_version == "1.0.0");
  CHECK(s.optimizer == "dp_reshardable");
  REQUIRE(s.dp);
  CHECK(*s.dp == 1);
  CHECK(s.dp_is_smallest);  // buckets padded to 65536 for NCCL: DP 2 would store the same
  CHECK_FALSE(fpgather::Checkpoint::open(kData + "/megatron/dp1-one-bucket/ckpt").inspect().dp_is_smallest);
  CHECK(s.tensors.size() == 36);  // 24 tensor keys and 12 bytes entries
  const auto v = c.validate();
  CHECK(v.valid);
  CHECK(v.tensors == 24);
  CHECK(v.chunks == 74);
  CHECK(fpgather::diff(c, fpgather::Checkpoint::open(kData + "/megatron/dp1-one-bucket/ckpt")).equal);

  fpg::test::CkptTempDir tmp("fpg-api-megatron");
  fpgather::ReshardOptions o;
  o.dp = 2;
  const auto r = fpgather::reshard(c, tmp.path + "/dp2", o);
  CHECK(r.from.state_layout == "dp_reshardable");
  CHECK(r.to.state_layout == "dp_reshardable");
  CHECK(r.to.dp == 2);
  CHECK(r.bytes_written > 0);
  const auto t = fpgather::Checkpoint::open(tmp.path + "/dp2");
  CHECK(t.validate().valid);
  CHECK(fpgather::diff(c, t).equal);
  o.dist_opt = "layerwise";
  CHECK(error_kind_of([&] { fpgather::reshard(c, tmp.path + "/x", o); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: a checkpoint's tensors in model space, read by range", "[api]") {
  const auto c = fpgather::Checkpoint::open(kData + "/megatron/dp1-one-bucket/ckpt");
  const fpgather::ParamReader r(c);
  REQUIRE_FALSE(r.tensors().empty());
  const std::size_t w = r.find("embedding.word_embeddings.weight");
  const auto& info = r.tensors()[w];
  CHECK(info.dtype == "BF16");
  CHECK(info.role == "weight");
  CHECK(info.shape == std::vector<uint64_t>{64, 32});
  CHECK(info.bytes == 64 * 32 * 2);
  const std::size_t m = r.find("embedding.word_embeddings.weight.exp_avg");
  CHECK(r.tensors()[m].param == "embedding.word_embeddings.weight");
  CHECK(r.tensors()[m].dtype == "F32");
  // A range is the whole tensor's bytes [2 lo, 2 hi).
  const std::vector<uint8_t> whole = r.read(w, 0, info.numel);
  REQUIRE(whole.size() == info.bytes);
  const std::vector<uint8_t> part = r.read(w, 100, 260);
  CHECK(std::vector<uint8_t>(whole.begin() + 200, whole.begin() + 520) == part);
  std::vector<uint8_t> buf(10);
  CHECK(error_kind_of([&] { r.read(w, 0, 4, fpgather::Span<uint8_t>(buf.data(), buf.size())); }) ==
        fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { r.read(w, 0, info.numel + 1); }) == fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { r.find("no.such.weight"); }) == fpgather::ErrorKind::usage);
  // A checkpoint failing validation is refused unless asked.
  const auto gap = fpgather::Checkpoint::open(kData + "/ckpt/broken/gap");
  CHECK(error_kind_of([&] { fpgather::ParamReader g(gap); }) == fpgather::ErrorKind::check_failed);
  fpgather::ParamReadOptions salvage;
  salvage.validate = false;
  CHECK_FALSE(fpgather::ParamReader(gap, salvage).tensors().empty());
}

TEST_CASE("api: inspect's JSON and one key's storage", "[api]") {
  const auto c = fpgather::Checkpoint::open(kData + "/megatron/dp1-one-bucket/ckpt");
  const auto plain = nlohmann::json::parse(c.inspect().json);
  CHECK(plain["format"] == "megatron_torch_dist");
  CHECK(plain["keys"].is_null());
  fpgather::InspectOptions o;
  o.keys = true;
  CHECK(nlohmann::json::parse(c.inspect(o).json)["keys"].is_array());
  const auto k = c.inspect_key("module.output_layer.weight");
  CHECK_FALSE(k.text.empty());
  CHECK(nlohmann::json::parse(k.json).is_object());
  CHECK(error_kind_of([&] { c.inspect_key("no/such/key"); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: reshard an fpgather checkpoint to another DP size", "[api]") {
  fpg::test::CkptTempDir tmp("fpg-api-reshard");
  const auto src = fpgather::Checkpoint::open(save_training_checkpoint(tmp.path + "/run"));
  REQUIRE(src.inspect().step);
  CHECK(*src.inspect().step == 2);
  fpgather::ReshardOptions o;
  o.dp = 4;
  o.state_layout = "bucket";

  o.dry_run = true;
  const auto plan = fpgather::reshard(src, tmp.path + "/dp4", o);
  CHECK(plan.dry_run);
  CHECK(error_kind_of([&] { fpgather::Checkpoint::open(tmp.path + "/dp4"); }) == fpgather::ErrorKind::format);

  o.dry_run = false;
  const auto r = fpgather::reshard(src, tmp.path + "/dp4", o);
  CHECK(r.from.dp == 2);
  CHECK(r.from.dist_opt == "bucketed");
  CHECK(r.from.state_layout == "model");
  CHECK(r.from.accumulation == 2);
  CHECK(r.to.dp == 4);
  CHECK(r.to.dist_opt == "bucketed");
  CHECK(r.to.state_layout == "bucket");
  CHECK(r.to.accumulation == 1);  // the global batch kept
  CHECK(r.tensors == plan.tensors);
  CHECK(r.bytes_written == plan.bytes_written);
  const auto dst = fpgather::Checkpoint::open(tmp.path + "/dp4");
  CHECK(dst.validate().valid);
  REQUIRE(dst.inspect().dp);
  CHECK(*dst.inspect().dp == 4);
  CHECK(fpgather::diff(src, dst).equal);

  CHECK(error_kind_of([&] { fpgather::reshard(src, tmp.path + "/dp4", o); }) == fpgather::ErrorKind::usage);
  o.state_layout = "rows";
  CHECK(error_kind_of([&] { fpgather::reshard(src, tmp.path + "/y", o); }) == fpgather::ErrorKind::usage);
  o.state_layout.clear();
  o.megatron_form = "fully_reshardable";
  CHECK(error_kind_of([&] { fpgather::reshard(src, tmp.path + "/y", o); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: convert a checkpoint to safetensors and to DCP", "[api]") {
  const auto src = fpgather::Checkpoint::open(kValid + "/dp2-bucket");
  fpg::test::CkptTempDir tmp("fpg-api-convert");
  fpgather::ConvertOptions o;
  o.dtype = "fp32";
  o.states = true;
  const auto r = fpgather::convert(src, tmp.path + "/model.safetensors", o);
  CHECK(r.tensors == 8);
  REQUIRE(r.files.size() == 1);
  const fpgather::SafetensorsReader st(tmp.path + "/model.safetensors");
  CHECK(st.tensors().size() == 8);
  CHECK(st.metadata().at("fpgather.step") == "7");
  // fp32 weights are the masters.
  CHECK(st.read_float32("blocks.0.w") == st.read_float32("blocks.0.w.master"));
  CHECK(st.read("norm.exp_avg").shape == std::vector<uint64_t>{65});

  // To DCP with the states: the same parameters, weights as held.
  fpgather::ConvertOptions d;
  d.to = "dcp";
  d.states = true;
  fpgather::convert(src, tmp.path + "/dcp", d);
  const auto dcp = fpgather::Checkpoint::open(tmp.path + "/dcp");
  CHECK(dcp.format() == fpgather::CheckpointFormat::torch_dcp);
  CHECK(dcp.validate().valid);
  const auto ds = dcp.inspect();
  CHECK(ds.optimizer == "model space");
  const auto* weight = find_tensor(ds, "model.blocks.0.w");
  REQUIRE(weight);
  CHECK(weight->kind == "tensor");
  CHECK(weight->dtype == "BF16");
  CHECK(weight->numel == 100);
  CHECK(fpgather::diff(src, dcp).equal);

  CHECK(error_kind_of([&] { fpgather::convert(src, tmp.path + "/dcp", d); }) == fpgather::ErrorKind::usage);
  d.dtype = "fp16";
  CHECK(error_kind_of([&] { fpgather::convert(src, tmp.path + "/z", d); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: safetensors written and read back", "[api]") {
  fpg::test::CkptTempDir tmp("fpg-api-st");
  const std::string path = tmp.path + "/t.safetensors";
  const std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  // BF16 1.0 = 0x3F80, -2.0 = 0xC000 (little-endian bytes)
  const fpgather::Tensor bf16{"b", "BF16", {2}, {0x80, 0x3F, 0x00, 0xC0}};
  fpgather::write_safetensors(path, {fpgather::float32_tensor("x", {2, 3}, x), bf16}, {{"note", "api"}});

  const fpgather::SafetensorsReader r(path);
  REQUIRE(r.tensors().size() == 2);
  CHECK(r.metadata().at("note") == "api");
  CHECK(r.read_float32("x") == x);
  CHECK(r.read_float32("b") == std::vector<float>{1.0f, -2.0f});
  const auto t = r.read("x");
  CHECK(t.dtype == "F32");
  CHECK(t.shape == std::vector<uint64_t>{2, 3});
  CHECK(t.data.size() == 24);

  CHECK(error_kind_of([&] { r.read("nope"); }) == fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { fpgather::float32_tensor("y", {4}, x); }) == fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { fpgather::write_safetensors(tmp.path + "/bad.safetensors", {{"z", "F99", {1}, {0}}}); }) ==
        fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { fpgather::write_safetensors(tmp.path + "/bad.safetensors", {{"z", "F32", {2}, {0, 0, 0, 0}}}); }) ==
        fpgather::ErrorKind::usage);
  const fpgather::Tensor ints{"i", "I64", {1}, std::vector<uint8_t>(8, 0)};
  fpgather::write_safetensors(tmp.path + "/ints.safetensors", {ints});
  CHECK(error_kind_of([&] { fpgather::SafetensorsReader(tmp.path + "/ints.safetensors").read_float32("i"); }) ==
        fpgather::ErrorKind::usage);
  std::ofstream(tmp.path + "/junk.safetensors") << "not a safetensors file";
  CHECK(error_kind_of([&] { fpgather::SafetensorsReader(tmp.path + "/junk.safetensors"); }) ==
        fpgather::ErrorKind::format);
}

TEST_CASE("api: quantize and dequantize with a recipe", "[api]") {
  // amax 2 -> scale 448/2 = 224: 1.3 -> 291.2 -> 288 = 0x79, -0.5 -> -112 = 0xee, 2 -> 448 = 0x7e
  const std::vector<float> x = {1.3f, -0.5f, 2.0f, 0.0f};
  const fpgather::Recipe tensorwise;
  const auto q = fpgather::quantize(tensorwise, {4}, x);
  CHECK(q.dtype == "F8_E4M3");
  CHECK(q.data == std::vector<uint8_t>{0x79, 0xee, 0x7e, 0x00});
  CHECK(q.scale_dtype == "F32");
  CHECK(q.scale_shape.empty());
  float inv = 0;
  REQUIRE(q.scale_inv.size() == 4);
  std::memcpy(&inv, q.scale_inv.data(), 4);
  CHECK(inv == 2.0f / 448.0f);
  const auto back = fpgather::dequantize(tensorwise, q);
  REQUIRE(back.size() == 4);
  CHECK(back[0] == Approx(288.0 / 224.0).epsilon(1e-6));
  CHECK(back[1] == -0.5f);
  CHECK(back[2] == 2.0f);
  CHECK(back[3] == 0.0f);

  // Each recipe gives what fp8/quantize.h gives, and its scale grid.
  const auto v = random_values(64 * 256, 3);
  struct Case {
    fpgather::Recipe recipe;
    fpg::fp8::Recipe internal;
    std::vector<uint64_t> scale_shape;
  };
  fpgather::Recipe block, row, mx, e5;
  block.scaling = "blockwise";
  row.scaling = "blockwise-1x128";
  row.pow2_scales = false;
  mx.scaling = "mxfp8";
  e5.format = "e5m2";
  const Case cases[] = {
      {block, fpg::fp8::Recipe::blockwise_128x128(), {1, 2}},
      {row, fpg::fp8::Recipe::blockwise_1x128(fpg::fp8::Format::e4m3, false), {64, 2}},
      {mx, fpg::fp8::Recipe::mxfp8(), {64, 8}},
      {e5, fpg::fp8::Recipe::tensorwise(fpg::fp8::Format::e5m2), {}},
  };
  for (const auto& c : cases) {
    const auto got = fpgather::quantize(c.recipe, {64, 256}, v);
    const auto want = fpg::fp8::quantize_tensor(c.internal, fpg::fp8::Input::f32, {64, 256}, v.data());
    CHECK(got.data == want.data);
    CHECK(got.scale_inv == want.scale_inv);
    CHECK(got.scale_shape == c.scale_shape);
    const auto d = fpgather::dequantize(c.recipe, got);
    CHECK(d == fpg::fp8::dequantize_tensor(c.internal, {64, 256}, want.data.data(), want.scale_inv.data()));
    double err = 0;
    for (size_t i = 0; i < v.size(); ++i) err = std::max(err, std::fabs(static_cast<double>(d[i]) - v[i]) / (std::fabs(v[i]) + 1e-2));
    CHECK(err < 0.25);  // e5m2 keeps 2 mantissa bits
  }

  fpgather::Recipe bad;
  bad.scaling = "delayed";
  CHECK(error_kind_of([&] { fpgather::quantize(bad, {4}, x); }) == fpgather::ErrorKind::usage);
  CHECK(error_kind_of([&] { fpgather::quantize(mx, {4}, x); }) == fpgather::ErrorKind::usage);  // K % 32
  CHECK(error_kind_of([&] { fpgather::quantize(tensorwise, {5}, x); }) == fpgather::ErrorKind::usage);
  auto cut = q;
  cut.scale_inv.pop_back();
  CHECK(error_kind_of([&] { fpgather::dequantize(tensorwise, cut); }) == fpgather::ErrorKind::usage);
}

TEST_CASE("api: optimizer steps", "[api]") {
  SECTION("AdamW, worked by hand") {
    // p = 1 * (1 - 0.1 * 0.01) = 0.999; m = 0.1 * 0.5 = 0.05, m^ = 0.5; v = 0.001 * 0.25, v^ = 0.25;
    // p -= 0.1 * 0.5 / (sqrt(0.25) + 1e-8) -> 0.899.
    auto o = fpgather::AdamOptions::adamw();
    o.lr = 0.1;
    std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
    fpgather::adam_step(o, 1, p, g, m, v);
    CHECK(p[0] == Approx(0.899).epsilon(1e-6));
    CHECK(m[0] == Approx(0.05).epsilon(1e-6));
    CHECK(v[0] == Approx(0.00025).epsilon(1e-6));
  }
  SECTION("Adam equals the CPU reference bit for bit") {
    auto p = random_values(1000, 1), m = random_values(1000, 2), v = random_values(1000, 3);
    for (auto& x : v) x = x * x;
    const auto g = random_values(1000, 4);
    auto p2 = p, m2 = m, v2 = v;
    fpgather::AdamOptions o;
    o.weight_decay = 0.1;
    fpgather::adam_step(o, 5, p, g, m, v);
    fpg::optim::AdamHyper h;
    h.weight_decay = 0.1;
    fpg::optim::adam_step(h, 5, p2.data(), g.data(), m2.data(), v2.data(), 1000);
    CHECK(std::memcmp(p.data(), p2.data(), 4000) == 0);
    CHECK(std::memcmp(v.data(), v2.data(), 4000) == 0);
  }
  SECTION("Lion, worked by hand") {
    // c = 0.9 * 0 + 0.1 * 0.5 > 0: p -= 1e-4 * sign(c); m = 0.99 * 0 + 0.01 * 0.5
    std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.0f};
    fpgather::lion_step(fpgather::LionOptions{}, p, g, m);
    CHECK(p[0] == Approx(1.0 - 1e-4).epsilon(1e-7));
    CHECK(m[0] == Approx(0.005).epsilon(1e-6));
  }
  SECTION("Muon equals the CPU reference bit for bit") {
    auto p = random_values(12, 5), m = random_values(12, 6);
    const auto g = random_values(12, 7);
    auto p2 = p, m2 = m;
    fpgather::muon_step(fpgather::MuonOptions{}, p, g, m, 4, 3);
    fpg::optim::muon_step(fpg::optim::MuonHyper{}, p2.data(), g.data(), m2.data(), 4, 3);
    CHECK(std::memcmp(p.data(), p2.data(), 48) == 0);
    CHECK(std::memcmp(m.data(), m2.data(), 48) == 0);
  }
  SECTION("sizes and arguments are checked") {
    std::vector<float> p(4), g(3), m(4), v(4);
    CHECK(error_kind_of([&] { fpgather::adam_step({}, 1, p, g, m, v); }) == fpgather::ErrorKind::usage);
    g.resize(4);
    CHECK(error_kind_of([&] { fpgather::adam_step({}, 0, p, g, m, v); }) == fpgather::ErrorKind::usage);
    CHECK(error_kind_of([&] { fpgather::muon_step({}, p, g, m, 3, 3); }) == fpgather::ErrorKind::usage);
    fpgather::MuonOptions mo;
    mo.adjust_lr = "rms";
    CHECK(error_kind_of([&] { fpgather::muon_step(mo, p, g, m, 2, 2); }) == fpgather::ErrorKind::usage);
  }
}

TEST_CASE("api: library settings", "[api]") {
  CHECK(fpgather::version() == FPGATHER_VERSION);
  CHECK(error_kind_of([] { fpgather::set_log_level("loud"); }) == fpgather::ErrorKind::usage);
  fpgather::set_log_level("warn");
  const fpgather::Error e(fpgather::ErrorKind::format, "x");
  CHECK(e.exit_code() == 3);
}
