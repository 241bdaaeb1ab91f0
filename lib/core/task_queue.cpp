#include "core/task_queue.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "core/thread_start.h"

namespace fpg {

TaskQueue::TaskQueue(size_t threads) {
  const size_t n = std::max<size_t>(1, threads);
  workers_.reserve(n);
  workers_.push_back(start_thread([this] { worker_loop(); }, "a task queue"));
  std::string why;
  for (size_t i = 1; i < n; ++i) {
    std::optional<std::thread> t = try_start_thread([this] { worker_loop(); }, &why);
    if (!t) {
      spdlog::warn("task queue: the system refused a thread ({}); working with {} of the {} threads asked for", why,
                   workers_.size(), n);
      break;
    }
    workers_.push_back(std::move(*t));
  }
}

TaskQueue::~TaskQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void TaskQueue::submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void TaskQueue::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

TaskQueue& TaskQueue::global() {
  // Sized from the pool, which set_global_threads may have replaced before the first save.
  static std::once_flag once;
  static std::unique_ptr<TaskQueue> queue;
  std::call_once(once, [] { queue = std::make_unique<TaskQueue>(ThreadPool::global().size()); });
  return *queue;
}

}  // namespace fpg
