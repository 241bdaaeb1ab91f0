// Starting a thread that the system may refuse. std::thread's constructor throws std::system_error
// (EAGAIN) when the process or its user is out of threads (ulimit -u, a cgroup's pids.max,
// kernel.threads-max); a pool that lets that escape from its constructor destroys the threads it
// already started while they are joinable, which ends the process. Every thread fpgather starts goes
// through here, so that each caller decides what a refusal means: a pool carries on with the threads
// it got, a helper thread that only reads ahead is left out, a thread the work cannot do without
// fails with an error that says why.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace fpg {

// Starts fn on a new thread, or returns nothing when the system refuses one; `why` (when given)
// then holds the system's reason.
std::optional<std::thread> try_start_thread(std::function<void()> fn, std::string* why = nullptr);

// Starts fn on a new thread, or throws Error (exit 3, as other refusals of the system's resources:
// a failed write) naming `what` the thread was for and the system's reason.
std::thread start_thread(std::function<void()> fn, const std::string& what);

// A task on a thread of its own, started through try_start_thread: what std::async(std::launch::async)
// gives, whose thread the system may refuse as well. As std::async's future, it waits for the task
// when destroyed (an exception leaving the scope does not outrun work that uses its locals).
template <class R>
class AsyncTask {
 public:
  AsyncTask() = default;
  AsyncTask(std::future<R> result, std::thread thread) : result_(std::move(result)), thread_(std::move(thread)) {}
  AsyncTask(AsyncTask&&) noexcept = default;
  AsyncTask& operator=(AsyncTask&& other) noexcept {
    join();
    result_ = std::move(other.result_);
    thread_ = std::move(other.thread_);
    return *this;
  }
  ~AsyncTask() { join(); }

  bool valid() const { return result_.valid(); }
  // The task's result, or its exception rethrown, once its thread has ended.
  R get() {
    join();
    return result_.get();
  }
  void wait() const { result_.wait(); }
  bool ready() const { return result_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

 private:
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::future<R> result_;
  std::thread thread_;
};

namespace detail {
template <class F>
std::pair<AsyncTask<std::invoke_result_t<F&>>, bool> start_async(F fn, bool run_here) {
  using R = std::invoke_result_t<F&>;
  // Shared: std::function (try_start_thread's argument) copies what it holds.
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(fn));
  std::future<R> result = task->get_future();
  std::optional<std::thread> thread = try_start_thread([task] { (*task)(); });
  if (thread) return {AsyncTask<R>(std::move(result), std::move(*thread)), true};
  if (!run_here) return {AsyncTask<R>(), false};
  (*task)();
  return {AsyncTask<R>(std::move(result), std::thread()), true};
}
}  // namespace detail

// fn on a thread of its own; where the system refuses one, fn runs here before this returns (work
// that runs beside the caller only to be faster).
template <class F>
AsyncTask<std::invoke_result_t<F&>> start_async(F fn) {
  return detail::start_async(std::move(fn), true).first;
}

// fn on a thread of its own, or nothing (fn not run) where the system refuses one: work that may be
// left out, such as asking the disk to read ahead.
template <class F>
std::optional<AsyncTask<std::invoke_result_t<F&>>> try_start_async(F fn) {
  auto [task, started] = detail::start_async(std::move(fn), false);
  if (!started) return std::nullopt;
  return std::move(task);
}

// How threads are started: std::thread unless replaced. Tests replace it to refuse threads as the
// system does under a thread limit, which a container running as root cannot be put under
// (RLIMIT_NPROC does not apply to root). The starter must start fn or throw std::system_error.
using ThreadStarter = std::function<std::thread(std::function<void()>)>;
// Replaces the starter for the whole process and returns the one it replaces; an empty starter
// restores std::thread. Threads already running are not affected.
ThreadStarter set_thread_starter(ThreadStarter starter);

}  // namespace fpg
