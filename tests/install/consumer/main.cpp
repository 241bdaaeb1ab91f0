// A program of the public API alone (<fpgather/fpgather.h>): FP8 quantization, an AdamW step, a
// safetensors round trip, and a training checkpoint opened, validated, inspected, compared and
// resharded. Usage: consumer CHECKPOINT WORKDIR. tests/cli/install.sh checks what it prints.
#include <fpgather/fpgather.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

int fails = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAILED: %s\n", what);
    ++fails;
  }
}

void quantize() {
  // amax 2 -> scale 448/2 = 224: 1.3 -> 291.2 -> 288 = 0x79, -0.5 -> -112 = 0xee, 2 -> 448 = 0x7e
  const std::vector<float> x = {1.3f, -0.5f, 2.0f, 0.0f};
  const fpgather::Recipe recipe;
  const fpgather::QuantizedTensor q = fpgather::quantize(recipe, {4}, x);
  std::printf("fp8 %s:", q.dtype.c_str());
  for (uint8_t b : q.data) std::printf(" %02x", b);
  const std::vector<float> back = fpgather::dequantize(recipe, q);
  std::printf("; dequantized:");
  for (float v : back) std::printf(" %g", v);
  std::printf("\n");
}

void adamw() {
  // p = 1 * (1 - 0.1 * 0.01) = 0.999; m^ = 0.5, v^ = 0.25; p -= 0.1 * 0.5 / (0.5 + 1e-8) -> 0.899
  fpgather::AdamOptions o = fpgather::AdamOptions::adamw();
  o.lr = 0.1;
  std::vector<float> p = {1.0f}, g = {0.5f}, m = {0.0f}, v = {0.0f};
  fpgather::adam_step(o, 1, p, g, m, v);
  expect(std::fabs(p[0] - 0.899f) < 1e-6f, "adamw step");
  std::printf("adamw: param %.6f exp_avg %.6f exp_avg_sq %.6f\n", p[0], m[0], v[0]);
}

void safetensors(const std::string& dir) {
  const std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::string path = dir + "/consumer.safetensors";
  fpgather::write_safetensors(path, {fpgather::float32_tensor("x", {2, 3}, x)}, {{"written_by", "consumer"}});
  const fpgather::SafetensorsReader r(path);
  const fpgather::TensorInfo& t = r.tensors().at(0);
  expect(r.read_float32("x") == x, "safetensors round trip");
  std::printf("safetensors: %s %s [%llu, %llu] %llu bytes, metadata written_by=%s\n", t.name.c_str(), t.dtype.c_str(),
              static_cast<unsigned long long>(t.shape.at(0)), static_cast<unsigned long long>(t.shape.at(1)),
              static_cast<unsigned long long>(t.bytes), r.metadata().at("written_by").c_str());
}

void checkpoint(const std::string& path, const std::string& dir) {
  const fpgather::Checkpoint c = fpgather::Checkpoint::open(path);
  const fpgather::ValidationReport v = c.validate();
  const fpgather::CheckpointSummary s = c.inspect();
  std::printf("checkpoint: %s, %s, step %llu, dp %u, %zu tensors, %llu chunks\n", fpgather::format_name(c.format()),
              v.valid ? "valid" : "INVALID", static_cast<unsigned long long>(s.step.value_or(0)), s.dp.value_or(0),
              s.tensors.size(), static_cast<unsigned long long>(v.chunks));
  fpgather::ReshardOptions o;
  o.dp = 1;
  const fpgather::ReshardReport r = fpgather::reshard(c, dir + "/dp1", o);
  const fpgather::Checkpoint resharded = fpgather::Checkpoint::open(dir + "/dp1");
  std::printf("resharded: dp %u -> %u, %s, diff %s\n", r.from.dp, r.to.dp,
              resharded.validate().valid ? "valid" : "INVALID",
              fpgather::diff(c, resharded).equal ? "equal" : "DIFFERENT");
  try {
    fpgather::Checkpoint::open(dir);
    expect(false, "a directory that is no checkpoint is refused");
  } catch (const fpgather::Error& e) {
    std::printf("not a checkpoint: exit code %d\n", e.exit_code());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer CHECKPOINT WORKDIR\n");
    return 2;
  }
  std::printf("fpgather %s\n", fpgather::version().c_str());
  try {
    quantize();
    adamw();
    safetensors(argv[2]);
    checkpoint(argv[1], argv[2]);
  } catch (const fpgather::Error& e) {
    std::printf("error (exit code %d): %s\n", e.exit_code(), e.what());
    return e.exit_code();
  }
  return fails == 0 ? 0 : 1;
}
