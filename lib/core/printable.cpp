#include "core/printable.h"

#include <cstdint>
#include <cstdio>

namespace fpg {
namespace {

void hex_byte(std::string& out, unsigned v) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", v & 0xffu);
  out += buf;
}

bool continuation(unsigned char c) { return (c & 0xc0) == 0x80; }

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629, Table 3-7 of Unicode), 0 if none.
// Surrogates (ED A0..BF xx) are not well-formed and give 0; the caller treats them apart.
size_t sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  const size_t left = s.size() - i;
  if (c >= 0xc2 && c <= 0xdf) return left >= 2 && continuation(b(1)) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (left < 3 || !continuation(b(1)) || !continuation(b(2))) return 0;
    if (c == 0xe0 && b(1) < 0xa0) return 0;   // overlong
    if (c == 0xed && b(1) >= 0xa0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (left < 4 || !continuation(b(1)) || !continuation(b(2)) || !continuation(b(3))) return 0;
    if (c == 0xf0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xf4 && b(1) >= 0x90) return 0;  // beyond U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case 0x1b: out += "\\x1b"; break;
        default:
          if (c < 0x20 || c == 0x7f) hex_byte(out, c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    if (c == 0xed && s.size() - i >= 3 && static_cast<unsigned char>(s[i + 1]) >= 0xa0 &&
        continuation(static_cast<unsigned char>(s[i + 1])) && continuation(static_cast<unsigned char>(s[i + 2]))) {
      const unsigned u = 0xd000u | ((static_cast<unsigned char>(s[i + 1]) & 0x3fu) << 6) |
                         (static_cast<unsigned char>(s[i + 2]) & 0x3fu);
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
      i += 3;
      continue;
    }
    const size_t n = sequence_length(s, i);
    if (n == 0) {
      hex_byte(out, c);
      ++i;
      continue;
    }
    if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      hex_byte(out, static_cast<unsigned char>(s[i + 1]));  // a C1 control, U+0080..U+009F
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

std::string quoted_name(std::string_view s) { return "'" + printable(s) + "'"; }

std::string shell_word(std::string_view s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:=+@%") ==
                        std::string_view::npos)
    return std::string(s);
  std::string q = "'";
  for (char ch : printable(s)) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

std::string printable_list(const std::vector<std::string>& names, size_t most) {
  std::string list;
  for (size_t i = 0; i < names.size() && i < most; ++i) list += (i ? ", " : "") + printable(names[i]);
  if (names.size() > most) list += " (and " + std::to_string(names.size() - most) + " more)";
  return list;
}

}  // namespace fpg
