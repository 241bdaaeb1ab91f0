// "Did you mean …?": the known name nearest to a mistyped one, by edit distance.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace fpg {

// Edits (insertions, deletions, substitutions, swaps of two adjacent characters) that turn a into b:
// the optimal-string-alignment distance, so that "inpsect" is one edit from "inspect".
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate nearest to `word`, if it is within max(len(word), 3) / 3 edits (cargo's rule: one edit
// for short words, more for long ones); the first in `candidates` order among equally near ones.
std::optional<std::string> closest_name(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fpg
