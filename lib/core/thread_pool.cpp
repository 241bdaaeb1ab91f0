#include "core/thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/thread_start.h"

namespace fpg {
namespace {

size_t hardware_threads() {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? hw : 1;
}

}  // namespace

size_t max_threads() { return std::max<size_t>(1024, 4 * hardware_threads()); }

size_t resolve_threads(size_t requested) {
  if (requested > max_threads())
    throw UsageError("threads must be at most " + std::to_string(max_threads()) + ", not " + std::to_string(requested));
  return requested > 0 ? requested : hardware_threads();
}

ThreadPool::ThreadPool(size_t threads) {
  const size_t n = resolve_threads(threads);
  workers_.reserve(n - 1);
  std::string why;
  for (size_t i = 1; i < n; ++i) {
    std::optional<std::thread> t = try_start_thread([this] { worker_loop(); }, &why);
    if (!t) {
      spdlog::warn("thread pool: the system refused a thread ({}); working with {} of the {} threads asked for",
                   why, workers_.size() + 1, n);
      break;
    }
    workers_.push_back(std::move(*t));
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

// Takes items one at a time until none are left; called with mu_ held, returns with it held.
void ThreadPool::run_items() {
  std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
  while (next_ < job_n_) {
    const size_t i = next_++;
    const auto* fn = job_;
    lock.unlock();
    try {
      (*fn)(i);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    if (++finished_ == job_n_) done_.notify_all();
  }
  lock.release();
}

void ThreadPool::worker_loop() {
  size_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++busy_;
    lock.release();  // run_items adopts the held lock and hands it back
    run_items();
    lock = std::unique_lock<std::mutex>(mu_, std::adopt_lock);
    if (--busy_ == 0) done_.notify_all();
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  // One job at a time: nested or concurrent calls from other threads run inline instead.
  if (job_ != nullptr) {
    lock.unlock();
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  next_ = finished_ = 0;
  error_ = nullptr;
  ++generation_;
  wake_.notify_all();
  lock.release();
  run_items();
  lock = std::unique_lock<std::mutex>(mu_, std::adopt_lock);
  done_.wait(lock, [&] { return finished_ == job_n_ && busy_ == 0; });
  job_ = nullptr;
  job_n_ = 0;
  std::exception_ptr err = error_;
  error_ = nullptr;
  lock.unlock();
  if (err) std::rethrow_exception(err);
}

namespace {
std::unique_ptr<ThreadPool>& global_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
// Rank threads may ask for the pool first, all at once (a checkpoint save on every rank): without
// the lock two of them could each create one and one would be destroyed while in use.
std::mutex& global_mutex() {
  static std::mutex mu;
  return mu;
}
}  // namespace

ThreadPool& ThreadPool::global() {
  std::lock_guard<std::mutex> lock(global_mutex());
  auto& slot = global_slot();
  if (!slot) slot = std::make_unique<ThreadPool>(0);
  return *slot;
}

void ThreadPool::set_global_threads(size_t threads) {
  std::lock_guard<std::mutex> lock(global_mutex());
  global_slot() = std::make_unique<ThreadPool>(threads);
}

}  // namespace fpg
