// The names the CLI and the public API both parse through lib/app: each accepted name maps to its own
// value, and anything else (other case, empty, a neighbour's name) is refused for the caller to report.
#include <string>

#include "app/convert/export_any.h"
#include "formats/dcp/megatron/megatron_reshard.h"
#include "catch.h"

using namespace fpg;

TEST_CASE("export format and weights names", "[export]") {
  CHECK(app::convert::parse_export_format("safetensors") == app::convert::ExportFormat::safetensors);
  CHECK(app::convert::parse_export_format("dcp") == app::convert::ExportFormat::dcp);
  for (const std::string bad : {"", "DCP", "torch_dcp", "bf16"}) CHECK_FALSE(app::convert::parse_export_format(bad));
  CHECK(app::convert::parse_export_weights("bf16") == app::convert::ExportWeights::bf16);
  CHECK(app::convert::parse_export_weights("fp32") == app::convert::ExportWeights::fp32);
  CHECK(app::convert::parse_export_weights("fp8") == app::convert::ExportWeights::fp8);
  for (const std::string bad : {"", "BF16", "fp16", "dcp"}) CHECK_FALSE(app::convert::parse_export_weights(bad));
}

TEST_CASE("Megatron reshard form names", "[reshard]") {
  CHECK(dcp::parse_megatron_form("dp_reshardable") == dcp::MegatronForm::dp_reshardable);
  CHECK(dcp::parse_megatron_form("fully_reshardable") == dcp::MegatronForm::fully_reshardable);
  for (const std::string bad : {"", "dp", "fully", "Fully_reshardable"}) CHECK_FALSE(dcp::parse_megatron_form(bad));
}
