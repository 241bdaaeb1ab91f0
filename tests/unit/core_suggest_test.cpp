// core/suggest.h: edit distance and the "did you mean" choice of the command line.
#include "core/suggest.h"

#include "catch.h"

using fpg::closest_name;
using fpg::edit_distance;

TEST_CASE("edit distance counts insertions, deletions, substitutions and adjacent swaps", "[suggest]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("inspect", "inspect") == 0);
  CHECK(edit_distance("inpsect", "inspect") == 1);  // one swap, not two substitutions
  CHECK(edit_distance("trian", "train") == 1);
  CHECK(edit_distance("conver", "convert") == 1);
  CHECK(edit_distance("reshardd", "reshard") == 1);
  CHECK(edit_distance("valldate", "validate") == 1);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("ca", "abc") == 3);  // optimal string alignment: a swapped pair is not edited again
  CHECK(edit_distance("bogus", "bench") == 4);
}

TEST_CASE("closest name suggests only what is near", "[suggest]") {
  const std::vector<std::string> commands{"train", "step", "convert", "inspect", "bench",
                                          "validate", "diff", "reshard", "completion"};
  CHECK(closest_name("inpsect", commands) == std::optional<std::string>("inspect"));
  CHECK(closest_name("tarin", commands) == std::optional<std::string>("train"));
  CHECK(closest_name("stpe", commands) == std::optional<std::string>("step"));
  CHECK(closest_name("dif", commands) == std::optional<std::string>("diff"));
  CHECK(closest_name("convetr", commands) == std::optional<std::string>("convert"));
  CHECK(closest_name("completoin", commands) == std::optional<std::string>("completion"));
  CHECK(!closest_name("bogus", commands));
  CHECK(!closest_name("x", commands));
  CHECK(!closest_name("", commands));
  CHECK(!closest_name("trainnnn", commands));  // 3 edits from train: too far for 8 letters
  CHECK(closest_name("--stpes", {"--steps", "--seed"}) == std::optional<std::string>("--steps"));
  // equally near: the first given wins
  CHECK(closest_name("bat", {"bad", "bar"}) == std::optional<std::string>("bad"));
}
