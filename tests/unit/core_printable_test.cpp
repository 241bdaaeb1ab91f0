// core/printable.h: names from files escaped for text output, so that none can act on a terminal,
// start a line or break UTF-8.
#include "catch.h"
#include "core/printable.h"

using fpg::printable;

TEST_CASE("printable: control characters are escaped", "[core][printable]") {
  CHECK(printable("model.w") == "model.w");
  CHECK(printable("a\nb\rc\td") == "a\\nb\\rc\\td");
  CHECK(printable("\x1b[31mred") == "\\x1b[31mred");
  CHECK(printable(std::string("\x00\x07\x08\x7f", 4)) == "\\x00\\x07\\x08\\x7f");
  CHECK(printable("x\xc2\x85y\xc2\x9b") == "x\\x85y\\x9b");  // C1 controls NEL and CSI
  CHECK(printable("back\\slash 'q'") == "back\\slash 'q'");
  CHECK(fpg::quoted_name("a\nb") == "'a\\nb'");
}

TEST_CASE("printable: valid UTF-8 is kept, each bad byte is escaped", "[core][printable]") {
  CHECK(printable("h\xc3\xa9llo \xe2\x86\x92 \xf0\x9f\x98\x80 \xc2\xa0") == "h\xc3\xa9llo \xe2\x86\x92 \xf0\x9f\x98\x80 \xc2\xa0");
  CHECK(printable("\xff\xfe") == "\\xff\\xfe");
  CHECK(printable("a\x80z") == "a\\x80z");                 // a lone continuation byte
  CHECK(printable("\xc3") == "\\xc3");                     // a sequence cut short
  CHECK(printable("\xe2\x86z") == "\\xe2\\x86z");
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");            // overlong '/'
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");  // overlong
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // beyond U+10FFFF
}

TEST_CASE("printable: surrogates encoded as three bytes are shown as \\u escapes", "[core][printable]") {
  CHECK(printable("s\xed\xa0\x80") == "s\\ud800");
  CHECK(printable("\xed\xbf\xbf") == "\\udfff");
  CHECK(printable("\xed\xa0\xbd\xed\xb8\x80") == "\\ud83d\\ude00");  // a CESU-8 pair
  CHECK(printable("\xed\x9f\xbf") == "\xed\x9f\xbf");                // U+D7FF is a character
  CHECK(printable("\xed\xa0") == "\\xed\\xa0");
}

TEST_CASE("printable: its output is its own printable", "[core][printable]") {
  for (const std::string s : {std::string("a\n\x1b\x7f\xc2\x85"), std::string("\xed\xa0\x80\xff z"), std::string("x\\ny")}) {
    const std::string once = printable(s);
    CHECK(printable(once) == once);
  }
}

TEST_CASE("printable_list: the first names, each printable, then how many more", "[core][printable]") {
  CHECK(fpg::printable_list({}) == "");
  CHECK(fpg::printable_list({"a", "b\x1b[2J"}) == "a, b\\x1b[2J");
  CHECK(fpg::printable_list({"a", "b", "c", "d"}, 2) == "a, b (and 2 more)");
}
