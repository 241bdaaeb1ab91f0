#include "ckpt/checkpoint_report.h"

namespace fpg::ckpt {

std::string count_of(uint64_t n, const std::string& noun) {
  std::string plural = noun;
  if (n != 1) plural += (!noun.empty() && (noun.back() == 's' || noun.back() == 'x')) ? "es" : "s";
  return std::to_string(n) + " " + plural;
}

void append_lines(std::vector<std::string>& lines, const std::string& text) {
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    lines.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
}

}  // namespace fpg::ckpt
