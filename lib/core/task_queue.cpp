#include "core/task_queue.h"

#include <algorithm>
#include <memory>

#include "core/thread_pool.h"

namespace fpg {

TaskQueue::TaskQueue(size_t threads) {
  for (size_t i = 0; i < std::max<size_t>(1, threads); ++i) workers_.emplace_back([this] { worker_loop(); });
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
