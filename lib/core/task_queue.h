// Worker threads that run submitted tasks asynchronously. ThreadPool::parallel_for blocks its caller
// and runs one job at a time; a checkpoint writer needs its caller to go on producing chunks while
// earlier ones are compressed and written (formats/fpckpt/chunk_pipeline.h).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fpg {

class TaskQueue {
 public:
  // At least 1 thread. Threads the system refuses to start are left out, with a warning; when it
  // refuses even the first, Error (exit 3): a task may wait for its submitter, so none can run inline.
  explicit TaskQueue(size_t threads);
  ~TaskQueue();                        // runs the tasks already submitted, then joins
  TaskQueue(const TaskQueue&) = delete;
  TaskQueue& operator=(const TaskQueue&) = delete;

  size_t size() const { return workers_.size(); }

  // Runs task on a worker, in submission order as workers free up. Tasks must not throw (an
  // exception ends the process) and must not wait for tasks submitted after them.
  void submit(std::function<void()> task);

  // The process-wide queue, with as many threads as ThreadPool::global() (so `--threads` sizes it);
  // created on first use.
  static TaskQueue& global();

 private:
  void worker_loop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
};

}  // namespace fpg
