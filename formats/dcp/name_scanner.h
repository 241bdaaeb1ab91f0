// A left-to-right scanner for the fixed grammars of stored names (Megatron's optimizer keys, torch's
// rank file names): each step consumes a literal, a run of decimal digits or of word characters
// ([A-Za-z0-9_]) and says whether it could. Linear in the name, no allocation: these names are
// matched once per key or chunk of checkpoints that hold millions (std::regex took minutes there).
#pragma once

#include <cstdint>
#include <string_view>

namespace fpg::dcp {

class NameScanner {
 public:
  explicit NameScanner(std::string_view s) : s_(s) {}

  size_t pos() const { return pos_; }
  bool done() const { return pos_ == s_.size(); }
  std::string_view rest() const { return s_.substr(pos_); }

  // Consumes `lit` if the name continues with it.
  bool literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }
  // Consumes 1 to max_digits decimal digits (all that follow, which must be at most that many).
  bool digits(uint64_t* value, size_t max_digits = 9) {
    size_t n = 0;
    uint64_t v = 0;
    while (pos_ + n < s_.size() && s_[pos_ + n] >= '0' && s_[pos_ + n] <= '9') {
      if (n == max_digits) return false;
      v = v * 10 + static_cast<uint64_t>(s_[pos_ + n] - '0');
      ++n;
    }
    if (n == 0) return false;
    pos_ += n;
    *value = v;
    return true;
  }
  // Consumes one or more word characters.
  bool word(std::string_view* out) {
    size_t n = 0;
    while (pos_ + n < s_.size() && is_word(s_[pos_ + n])) ++n;
    if (n == 0) return false;
    *out = s_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }
  // Whether every character of s is one that a regex '.' matches (not a line terminator).
  static bool no_line_breaks(std::string_view s) { return s.find_first_of("\n\r") == std::string_view::npos; }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace fpg::dcp
