// core/thread_start.h: what the pools do when the system refuses a thread. The refusal is made by a
// replaced starter, as the tests run as root in containers, where RLIMIT_NPROC does not apply.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "catch.h"
#include "comm/threads_backend.h"
#include "core/error.h"
#include "core/task_queue.h"
#include "core/thread_pool.h"
#include "core/thread_start.h"

namespace {

// Lets `allowed` threads start, then refuses every other as std::thread does under a thread limit.
class RefuseThreadsAfter {
 public:
  explicit RefuseThreadsAfter(size_t allowed) {
    previous_ = fpg::set_thread_starter([this, allowed](std::function<void()> fn) {
      if (started_.fetch_add(1) >= allowed)
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      return std::thread(std::move(fn));
    });
  }
  ~RefuseThreadsAfter() { fpg::set_thread_starter(previous_); }
  RefuseThreadsAfter(const RefuseThreadsAfter&) = delete;
  RefuseThreadsAfter& operator=(const RefuseThreadsAfter&) = delete;

 private:
  std::atomic<size_t> started_{0};
  fpg::ThreadStarter previous_;
};

void check_runs_everything(fpg::ThreadPool& pool) {
  std::vector<std::atomic<int>> hits(200);
  pool.parallel_for(hits.size(), [&](size_t i) { hits[i]++; });
  for (auto& h : hits) REQUIRE(h == 1);
}

}  // namespace

TEST_CASE("a pool refused some threads works with those it got", "[core][threads]") {
  RefuseThreadsAfter limit(2);
  fpg::ThreadPool pool(8);
  CHECK(pool.size() == 3);  // two workers and the caller
  check_runs_everything(pool);
}

TEST_CASE("a pool refused every thread runs on the caller", "[core][threads]") {
  {
    RefuseThreadsAfter limit(0);
    fpg::ThreadPool pool(8);
    CHECK(pool.size() == 1);
    check_runs_everything(pool);
    fpg::ThreadPool::set_global_threads(4);  // the process-wide pool degrades alike
    CHECK(fpg::ThreadPool::global().size() == 1);
    check_runs_everything(fpg::ThreadPool::global());
  }
  fpg::ThreadPool::set_global_threads(0);  // the other tests get a whole pool again
  CHECK(fpg::ThreadPool::global().size() == fpg::resolve_threads(0));
}

TEST_CASE("a pool asked for more than max_threads is refused, naming the field", "[core][threads]") {
  CHECK(fpg::max_threads() >= 1024);
  CHECK_THROWS_AS(fpg::ThreadPool(fpg::max_threads() + 1), fpg::UsageError);
  try {
    fpg::resolve_threads(size_t{1} << 40);
    FAIL("2^40 threads were accepted");
  } catch (const fpg::UsageError& e) {
    CHECK(std::string(e.what()).find("threads must be at most " + std::to_string(fpg::max_threads())) == 0);
  }
  CHECK(fpg::resolve_threads(fpg::max_threads()) == fpg::max_threads());
}

TEST_CASE("a task queue works with the threads it got, and fails cleanly with none", "[core][threads]") {
  {
    RefuseThreadsAfter limit(1);
    fpg::TaskQueue queue(4);
    CHECK(queue.size() == 1);
    std::atomic<int> ran{0};
    for (int i = 0; i < 20; ++i) queue.submit([&] { ran++; });
    while (ran < 20) std::this_thread::yield();
  }
  RefuseThreadsAfter none(0);
  try {
    fpg::TaskQueue queue(2);
    FAIL("a queue without a thread was made");
  } catch (const fpg::Error& e) {
    CHECK(e.code() == fpg::ExitCode::io);
    CHECK(std::string(e.what()).find("the system refused a thread for a task queue") != std::string::npos);
  }
}

TEST_CASE("a threads communicator refused a rank's thread fails with an error and leaves no thread", "[core][threads]") {
  auto group = fpg::comm::make_threads_group(4, {});
  RefuseThreadsAfter limit(1);  // rank 1 starts, rank 2 is refused
  std::atomic<int> ran{0};
  try {
    group->run([&](fpg::comm::Communicator& c) {
      ran++;
      c.barrier()->wait();  // rank 0 and 1 would wait here for ranks that never came
    });
    FAIL("the run did not fail");
  } catch (const fpg::Error& e) {
    CHECK(e.code() == fpg::ExitCode::io);
    CHECK(std::string(e.what()).find("rank 2 of 4") != std::string::npos);
  }
}

TEST_CASE("a task runs on a thread of its own, or on the caller when the system refuses one", "[core][threads]") {
  const std::thread::id caller = std::this_thread::get_id();
  for (const size_t allowed : {size_t{1}, size_t{0}}) {
    INFO("threads allowed: " << allowed);
    RefuseThreadsAfter limit(allowed);
    std::thread::id ran_on;
    fpg::AsyncTask<int> task = fpg::start_async([&] {
      ran_on = std::this_thread::get_id();
      return 7;
    });
    REQUIRE(task.valid());
    CHECK(task.get() == 7);
    CHECK((ran_on == caller) == (allowed == 0));
    fpg::AsyncTask<void> failing = fpg::start_async([]() -> void { throw std::runtime_error("the task's error"); });
    CHECK_THROWS_WITH(failing.get(), "the task's error");
  }
}

TEST_CASE("work that may be left out is not run when the system refuses its thread", "[core][threads]") {
  std::atomic<int> ran{0};
  {
    RefuseThreadsAfter limit(0);
    CHECK_FALSE(fpg::try_start_async([&] { ran++; }).has_value());
  }
  CHECK(ran == 0);
  std::optional<fpg::AsyncTask<void>> task = fpg::try_start_async([&] { ran++; });
  REQUIRE(task.has_value());
  task->get();
  CHECK(ran == 1);
}

TEST_CASE("a task left without get is waited for when it is destroyed or replaced", "[core][threads]") {
  std::atomic<int> done{0};
  auto slow = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    done++;
  };
  {
    fpg::AsyncTask<void> task = fpg::start_async(slow);
  }
  CHECK(done == 1);
  fpg::AsyncTask<void> task = fpg::start_async(slow);
  task = fpg::start_async(slow);  // the first one's thread is joined before it is let go
  CHECK(done >= 2);
  task.get();
  CHECK(done == 3);
}
