#include <atomic>
#include <stdexcept>
#include <vector>

#include "catch.h"
#include "core/thread_pool.h"

using fpg::ThreadPool;

TEST_CASE("parallel_for runs every item exactly once", "[core][threads]") {
  for (size_t threads : {1, 2, 4, 7}) {
    ThreadPool pool(threads);
    CHECK(pool.size() == threads);
    for (size_t n : {0, 1, 3, 100, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t i) { hits[i]++; });
      for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
    }
  }
}

TEST_CASE("parallel_for rethrows the first exception after all items ran", "[core][threads]") {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  REQUIRE_THROWS_AS(pool.parallel_for(50,
                                      [&](size_t i) {
                                        ran++;
                                        if (i == 7) throw std::runtime_error("item 7");
                                      }),
                    std::runtime_error);
  CHECK(ran == 50);
  // the pool stays usable
  std::atomic<int> again{0};
  pool.parallel_for(10, [&](size_t) { again++; });
  CHECK(again == 10);
}

TEST_CASE("nested parallel_for runs inline instead of deadlocking", "[core][threads]") {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.parallel_for(4, [&](size_t) { pool.parallel_for(5, [&](size_t) { inner++; }); });
  CHECK(inner == 20);
}
