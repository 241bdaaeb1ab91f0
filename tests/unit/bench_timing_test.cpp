// cmd/bench/timing.h: the median and summaries every `fpgather bench` figure is computed from, and the
// repeat-until-stable loop that times host code.
#include "cmd/bench/timing.h"

#include <chrono>
#include <thread>

#include "catch.h"
#include "core/error.h"

using namespace fpg::bench;

TEST_CASE("bench timing: median is the middle sample, or the mean of the two middle ones", "[bench-timing]") {
  CHECK(median({}) == -1);
  CHECK(median({4.0}) == 4.0);
  CHECK(median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(median({5.0, 5.0, 1.0, 9.0, 9.0, 9.0}) == 7.0);
}

TEST_CASE("bench timing: summarize gives the fastest, the median and the count", "[bench-timing]") {
  const Timing t = summarize({0.5, 0.2, 0.9, 0.4});
  CHECK(t.best == 0.2);
  CHECK(t.median == Approx(0.45));
  CHECK(t.reps == 4);
  CHECK_THROWS_AS(summarize({}), fpg::InternalError);
}

TEST_CASE("bench timing: time_it warms up once, then repeats for the minimum count and time", "[bench-timing]") {
  int calls = 0;
  const Timing few = time_it([&] { ++calls; }, 5, 0.0);
  CHECK(few.reps == 5);
  CHECK(calls == 6);

  calls = 0;
  const auto sleep = [&] {
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  const Timing timed = time_it(sleep, 1, 0.02);
  CHECK(timed.reps >= 5);  // 20 ms of 2 ms repetitions, at least
  CHECK(calls == timed.reps + 1);
  CHECK(timed.best >= 0.002);
  CHECK(timed.median >= timed.best);
}

TEST_CASE("bench timing: the wall clock is monotonic and measures sleeps", "[bench-timing]") {
  const double t0 = wall_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double dt = wall_seconds() - t0;
  CHECK(dt >= 0.005);
  CHECK(dt < 5.0);
  CHECK(cpu_seconds() > 0);
}
