#include "option_range.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

namespace fpg::cli {
namespace {

std::string range_text(uint64_t lo, uint64_t hi) {
  if (hi == kNoLimit) return "an integer of at least " + std::to_string(lo);
  return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// "at least 0 and less than 1", "greater than 0".
std::string number_text(double lo, double hi, bool lo_open, bool hi_open) {
  std::string text = (lo_open ? "greater than " : "at least ") + number(lo);
  if (!std::isinf(hi)) text += (hi_open ? " and less than " : " and at most ") + number(hi);
  return text;
}

// The option's help with its range at the end: "Optimizer steps (1 to 10000000)".
void state_range(CLI::Option* opt, const std::string& range) {
  opt->description(opt->get_description() + " (" + range + ")");
}

}  // namespace

std::string integer_range_error(const std::string& text, uint64_t lo, uint64_t hi) {
  bool ok = !text.empty() && text.size() <= 20;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) {
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
    ok = errno == 0 && v >= lo && v <= hi;
  }
  return ok ? "" : "must be " + range_text(lo, hi) + ", not '" + text + "'";
}

CLI::Option* integer_range(CLI::Option* opt, uint64_t lo, uint64_t hi) {
  // A transform, not a check: CLI11 hands a check a copy of the text.
  opt->transform(CLI::Validator(
      [lo, hi](std::string& text) {
        std::string error = integer_range_error(text, lo, hi);
        // Leading zeros dropped: CLI11 would read "010" as octal.
        if (error.empty()) text = std::to_string(std::strtoull(text.c_str(), nullptr, 10));
        return error;
      },
      ""));
  state_range(opt, hi == kNoLimit ? std::to_string(lo) + " or more" : std::to_string(lo) + " to " + std::to_string(hi));
  return opt;
}

CLI::Option* number_range(CLI::Option* opt, double lo, double hi, bool lo_open, bool hi_open) {
  opt->check(CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = !text.empty() && end == text.c_str() + text.size() && std::isfinite(v) &&
                        (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
        return ok ? "" : "must be a number " + number_text(lo, hi, lo_open, hi_open) + ", not '" + text + "'";
      },
      ""));
  state_range(opt, number_text(lo, hi, lo_open, hi_open));
  return opt;
}

}  // namespace fpg::cli
