// A fixed pool of worker threads with a blocking parallel_for; the `--threads` option sizes it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fpg {

class ThreadPool {
 public:
  // threads == 0 means one per hardware thread; more than max_threads() is refused (UsageError). A
  // pool of 1 runs everything on the caller. Workers the system refuses to start are left out, with
  // a warning: the pool works with the threads it got, at the least the caller.
  explicit ThreadPool(size_t threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }  // the caller works too

  // Calls fn(i) for every i in [0, n), spread over the pool and the caller; returns when all are
  // done. The first exception thrown by fn is rethrown here (the remaining items still run).
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);

  // The process-wide pool that `--threads` configures; created on first use (thread-safe). Set it
  // before starting work: set_global_threads replaces the pool.
  static ThreadPool& global();
  static void set_global_threads(size_t threads);

 private:
  void worker_loop();
  void run_items();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t job_n_ = 0, next_ = 0, finished_ = 0, generation_ = 0, busy_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

// The most threads a pool may be asked for: 4 per hardware thread, at least 1024. More only adds
// contention, and each thread reserves a stack and counts against the system's process limit.
size_t max_threads();

// Resolves a requested thread count: 0 -> hardware threads (at least 1). UsageError ("threads must
// be at most N") above max_threads().
size_t resolve_threads(size_t requested);

}  // namespace fpg
