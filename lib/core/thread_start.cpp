#include "core/thread_start.h"

#include <mutex>
#include <system_error>
#include <utility>

#include "core/error.h"

namespace fpg {
namespace {

std::mutex& starter_mutex() {
  static std::mutex mu;
  return mu;
}

ThreadStarter& starter_slot() {
  static ThreadStarter starter;
  return starter;
}

}  // namespace

ThreadStarter set_thread_starter(ThreadStarter starter) {
  std::lock_guard<std::mutex> lock(starter_mutex());
  return std::exchange(starter_slot(), std::move(starter));
}

std::optional<std::thread> try_start_thread(std::function<void()> fn, std::string* why) {
  ThreadStarter starter;
  {
    // Copied out: a thread it starts may start threads of its own.
    std::lock_guard<std::mutex> lock(starter_mutex());
    starter = starter_slot();
  }
  try {
    if (starter) return starter(std::move(fn));
    return std::thread(std::move(fn));
  } catch (const std::system_error& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

std::thread start_thread(std::function<void()> fn, const std::string& what) {
  std::string why;
  std::optional<std::thread> t = try_start_thread(std::move(fn), &why);
  if (!t)
    throw Error(ExitCode::io, "the system refused a thread for " + what + " (" + why +
                                  "): the thread limit (ulimit -u, the cgroup's pids.max) is reached");
  return std::move(*t);
}

}  // namespace fpg
