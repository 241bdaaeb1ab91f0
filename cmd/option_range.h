// Bounds on numeric options, checked as the command line is parsed: a value out of range is refused
// with exit 2 and "--steps must be an integer from 1 to 10000000, not '-5'" before anything runs.
//
// CLI11 (2.1) converts an unsigned option with strtoull, which takes "-5" as 2^64 - 5, saturates an
// overflow silently and reads "010" as octal; these checks run on the text before that conversion,
// so a count is accepted only as plain decimal digits within its range. Each check also states its
// range at the end of the option's help.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>

namespace fpg::cli {

// No upper bound beyond what the option's type holds.
constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// opt takes an integer in [lo, hi], written in decimal digits. hi must fit the option's type (an
// int option gets at most INT_MAX), so that the conversion after the check cannot fail or wrap.
CLI::Option* integer_range(CLI::Option* opt, uint64_t lo, uint64_t hi);

// opt takes a finite number from lo to hi, lo excluded when lo_open ("greater than 0") and hi when
// hi_open ("less than 1"); hi may be infinity: no upper bound.
CLI::Option* number_range(CLI::Option* opt, double lo, double hi, bool lo_open = false, bool hi_open = false);

// "must be an integer from 1 to 1024, not '-1'" for `text`, or "" when it is one in [lo, hi]: for
// options that hold a list or a word besides the number (--dp-list, --bucket-size none).
std::string integer_range_error(const std::string& text, uint64_t lo, uint64_t hi);

}  // namespace fpg::cli
