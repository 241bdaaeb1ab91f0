// Names read from files (keys, paths inside a checkpoint) as they may be shown on a terminal or in a
// log: a hostile file must not be able to start a line, move the cursor or colour the output of a
// command by the bytes of a name, nor break the text with bytes that are not UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fpg {

// `s` with every byte that could act on a terminal or is not well-formed UTF-8 written as an escape:
// "\n", "\r", "\t", "\x1b" for those; any other C0 control, DEL and C1 control (U+0080..U+009F) as
// "\xNN"; a byte that does not start or continue a well-formed UTF-8 sequence as "\xNN", each byte on
// its own; a UTF-16 surrogate encoded as three bytes (WTF-8/CESU-8, what Python's "surrogatepass"
// writes for a lone surrogate) as "\udNNN". Everything else, valid UTF-8 beyond ASCII included, is
// kept as it is. Backslashes are kept too, so the result of printable() is its own printable().
std::string printable(std::string_view s);

// printable(s) between single quotes, as messages quote a name: "'model.w'".
std::string quoted_name(std::string_view s);

// `s` as one word of a POSIX shell command line that a user may paste: as it is when it holds only
// characters the shell takes literally, else printable(s) between single quotes (a quote within as '\'').
std::string shell_word(std::string_view s);

// The first `most` of `names`, each printable(), joined by ", ", then " (and N more)" for the rest:
// names read from a file, listed in a message.
std::string printable_list(const std::vector<std::string>& names, size_t most = 8);

}  // namespace fpg
