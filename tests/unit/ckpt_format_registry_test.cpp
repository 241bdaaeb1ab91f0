// The format seam (ckpt/format_registry.h): each fixture is recognised by its own format and opened
// under its name; a safetensors model answers summary, validate and params like a checkpoint; what
// no format recognises is refused naming what each format looks for.
#include <cstring>
#include <filesystem>
#include <string>

#include "catch.h"
#include "ckpt/format_registry.h"
#include "core/dtype.h"
#include "core/error.h"

namespace {

const std::string kData = FPG_TESTDATA_DIR;

std::string format_of(const std::string& path) { return std::string(fpg::ckpt::open_checkpoint(path)->format()); }

}  // namespace

TEST_CASE("each fixture opens under its own format", "[ckpt][format]") {
  const auto& formats = fpg::ckpt::builtin_formats().formats();
  REQUIRE(formats.size() == 3);
  CHECK(formats[0]->name() == "fpgather");
  CHECK(formats[1]->name() == "dcp");
  CHECK(formats[2]->name() == "safetensors");
  CHECK(format_of(kData + "/ckpt/valid/dp2-model") == "fpgather");
  CHECK(format_of(kData + "/megatron/dp1-buckets-padded/ckpt") == "megatron_torch_dist");
  CHECK(format_of(kData + "/models/tiny-llama.safetensors") == "safetensors");
}

TEST_CASE("a safetensors model is a checkpoint of weights", "[ckpt][format]") {
  const auto c = fpg::ckpt::open_checkpoint(kData + "/models/tiny-llama.safetensors");
  const fpg::ckpt::CheckpointSummary s = c->summary({});
  CHECK(s.format == "safetensors");
  REQUIRE(!s.tensors.empty());
  CHECK(s.document["totals"]["tensors"].get<uint64_t>() == s.tensors.size());

  fpg::ckpt::ValidateOptions o;
  o.data = true;
  const fpg::ckpt::ValidationReport r = c->validate(o);
  CHECK(r.ok());
  CHECK(r.chunks_read == s.tensors.size());
  CHECK(r.bytes_read == s.bytes);

  // Its parameters read the stored bytes.
  const auto p = c->params({});
  const auto& t = p->params().tensors();
  REQUIRE(t.size() == s.tensors.size());
  CHECK(t[0].role == "weight");
  std::vector<uint8_t> buf(fpg::dtype_bytes(t[0].dtype, t[0].numel()));
  p->params().read(0, 0, t[0].numel(), buf.data());
  CHECK_THROWS_AS(p->params().read(0, 0, t[0].numel() + 1, buf.data()), fpg::FormatError);
}

TEST_CASE("a path no format recognises names what each looks for", "[ckpt][format]") {
  const auto dir = std::filesystem::temp_directory_path() / "fpg-registry-empty";
  std::filesystem::create_directories(dir);
  try {
    fpg::ckpt::open_checkpoint(dir.string());
    FAIL("opened an empty directory");
  } catch (const fpg::FormatError& e) {
    const std::string m = e.what();
    CHECK(m.find("not a checkpoint") != std::string::npos);
    CHECK(m.find("index.h5 or latest (fpgather)") != std::string::npos);
    CHECK(m.find(".metadata") != std::string::npos);
    CHECK(m.find("model.safetensors") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
  CHECK_THROWS_AS(fpg::ckpt::open_checkpoint(dir.string() + "/missing"), fpg::FormatError);
}
