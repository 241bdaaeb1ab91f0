// Failures on the threads communicator end every rank cleanly: no hangs, the root cause reported.
// Every run has a timeout as a hang guard; the checks on elapsed time prove the abort, not the
// timeout, released the waiting ranks.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "comm/comm_error.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm_test_util.h"
#include "core/error.h"

using fpg::DType;
using fpg::UsageError;
using fpg::comm::CommAborted;
using fpg::comm::Communicator;
using fpg::comm::ReduceOp;
using fpg::comm::run_ranks;
using namespace comm_test;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

TEST_CASE("an exception on one rank aborts the ranks waiting in a collective", "[comm]") {
  for (const auto& opts : modes())
    for (int n : {2, 3, 4, 8})
      for (int bad : {0, n - 1}) {
        std::atomic<int> aborted{0}, after{0};
        const auto t0 = Clock::now();
        std::string message;
        try {
          run_ranks(n, [&](Communicator& c) {
            std::vector<float> v(100, 1.0f);
            c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::sum)->wait();  // one good collective
            if (c.rank() == bad) {
              std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the others block first
              throw std::runtime_error("rank failed on purpose");
            }
            try {
              c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::sum)->wait();
              c.barrier()->wait();
            } catch (const CommAborted&) {
              aborted++;
              throw;
            }
            after++;
          }, opts);
        } catch (const CommAborted&) {
          message = "CommAborted instead of the root cause";
        } catch (const std::runtime_error& e) {
          message = e.what();
        }
        REQUIRE(message == "rank failed on purpose");
        REQUIRE(aborted == n - 1);
        REQUIRE(after == 0);
        REQUIRE(seconds_since(t0) < 30);
      }
}

TEST_CASE("an exception on a rank that others have not yet caught up with", "[comm]") {
  // rank 0 fails at once; the others get there later and fail on arrival
  std::atomic<int> aborted{0};
  REQUIRE_THROWS_AS(run_ranks(4, [&](Communicator& c) {
    if (c.rank() == 0) throw UsageError("bad input on rank 0");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    try {
      c.barrier()->wait();
    } catch (const CommAborted&) {
      aborted++;
      throw;
    }
  }, modes()[0]), UsageError);
  REQUIRE(aborted == 3);
}

TEST_CASE("a rank that returns while others wait aborts the group", "[comm]") {
  for (const auto& opts : modes()) {
    const auto t0 = Clock::now();
    REQUIRE_THROWS_AS(run_ranks(3, [&](Communicator& c) {
      if (c.rank() == 1) return;  // never joins the collective below
      std::vector<float> v(8, 1.0f);
      c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::sum)->wait();
    }, opts), CommAborted);
    REQUIRE(seconds_since(t0) < 30);
  }
}

TEST_CASE("mismatched collectives are a usage error on every rank", "[comm]") {
  for (const auto& opts : modes()) {
    std::atomic<int> usage{0};
    REQUIRE_THROWS_AS(run_ranks(3, [&](Communicator& c) {
      std::vector<float> v(8, 1.0f);
      try {
        if (c.rank() == 2) {
          c.broadcast(v.data(), 32, 0)->wait();
        } else {
          c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::sum)->wait();
        }
      } catch (const UsageError&) {
        usage++;
        throw;
      }
    }, opts), UsageError);
    REQUIRE(usage == 3);

    usage = 0;
    REQUIRE_THROWS_AS(run_ranks(2, [&](Communicator& c) {
      std::vector<uint8_t> v(16);
      try {
        c.all_gather(v.data(), c.rank() == 0 ? 8 : 4)->wait();  // sizes differ
      } catch (const UsageError&) {
        usage++;
        throw;
      }
    }, opts), UsageError);
    REQUIRE(usage == 2);
  }
}

TEST_CASE("a rank stuck outside collectives trips the timeout", "[comm]") {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(50);
  // rank 2 arrives only once rank 0 has been released by the timeout: no race with the scheduler
  std::promise<void> timed_out;
  std::shared_future<void> released = timed_out.get_future().share();
  const auto t0 = Clock::now();
  REQUIRE_THROWS_AS(run_ranks(3, [&](Communicator& c) {
    if (c.rank() == 2) released.wait_for(std::chrono::seconds(30));
    try {
      c.barrier()->wait();
    } catch (const CommAborted&) {
      if (c.rank() == 0) timed_out.set_value();
      throw;
    }
  }, opts), CommAborted);
  REQUIRE(seconds_since(t0) < 30);
}

TEST_CASE("bad arguments are usage errors before anything is sent", "[comm]") {
  run_ranks(2, [&](Communicator& c) {
    std::vector<uint8_t> b(64);
    std::vector<uint16_t> h(8);
    // thrown on every rank alike, so the group stays in step and can go on
    try { (void)c.broadcast(b.data(), 4, 2); } catch (const UsageError&) { b[0] = 1; }
    try { (void)c.gather_bytes({}, -1); } catch (const UsageError&) { b[1] = 1; }
    try { (void)c.all_gather_v(b.data(), std::vector<size_t>{1, 2, 3}); } catch (const UsageError&) { b[2] = 1; }
    try { (void)c.all_reduce(h.data(), 8, DType::F16, ReduceOp::sum); } catch (const UsageError&) { b[3] = 1; }
    try { (void)c.all_gather(b.data() + 1, b.data(), 8); } catch (const UsageError&) { b[4] = 1; }  // partial overlap
    try { (void)c.all_reduce(b.data(), b.data() + 4, 4, DType::F32, ReduceOp::max); } catch (const UsageError&) { b[5] = 1; }
    try { (void)c.all_gather(nullptr, 4); } catch (const UsageError&) { b[6] = 1; }
    for (int i = 0; i < 7; ++i)
      if (b[static_cast<size_t>(i)] != 1) throw std::runtime_error("missing usage error " + std::to_string(i));
    c.barrier()->wait();
  }, modes()[0]);
}

TEST_CASE("a group runs again after a failed run", "[comm]") {
  auto group = fpg::comm::make_communicator_group("threads", 3, modes()[1]);
  REQUIRE_THROWS_AS(group->run([](Communicator& c) {
    if (c.rank() == 1) throw std::runtime_error("first run fails");
    c.barrier()->wait();
  }), std::runtime_error);
  std::atomic<int> ok{0};
  group->run([&](Communicator& c) {
    float x = 1;
    c.all_reduce(&x, 1, DType::F32, ReduceOp::sum)->wait();
    if (x == 3) ok++;
  });
  REQUIRE(ok == 3);
}
