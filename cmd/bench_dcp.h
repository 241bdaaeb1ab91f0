// `fpgather bench dcp-make` and `fpgather bench dcp`: their options and output.
#pragma once

#include "cmd/cli.h"

namespace fpg::cli {

// Adds the two subcommands to `bench`.
void register_bench_dcp(CLI::App& bench, const GlobalOptions& global, Runner& run);

}  // namespace fpg::cli
