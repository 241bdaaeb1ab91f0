// --json output: one document on stdout.
#pragma once

#include <nlohmann/json.hpp>

namespace fpg::cli {

// Prints `j`, indented by 2, and a newline. Strings taken from files (keys, paths, values) may hold
// bytes that are not UTF-8 (a lone surrogate as Python writes it, a stray byte); each such byte is
// written as U+FFFD (nlohmann's error_handler_t::replace) rather than failing, so the output is always
// valid JSON. The text output shows the same bytes as \xNN escapes (core/printable.h).
void print_json(const nlohmann::json& j);

}  // namespace fpg::cli
