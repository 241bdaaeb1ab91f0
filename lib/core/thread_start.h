// Starting a thread that the system may refuse. std::thread's constructor throws std::system_error
// (EAGAIN) when the process or its user is out of threads (ulimit -u, a cgroup's pids.max,
// kernel.threads-max); a pool that lets that escape from its constructor destroys the threads it
// already started while they are joinable, which ends the process. Every thread fpgather starts goes
// through here, so that each caller decides what a refusal means: a pool carries on with the threads
// it got, a helper thread that only reads ahead is left out, a thread the work cannot do without
// fails with an error that says why.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace fpg {

// Starts fn on a new thread, or returns nothing when the system refuses one; `why` (when given)
// then holds the system's reason.
std::optional<std::thread> try_start_thread(std::function<void()> fn, std::string* why = nullptr);

// Starts fn on a new thread, or throws Error (exit 3, as other refusals of the system's resources:
// a failed write) naming `what` the thread was for and the system's reason.
std::thread start_thread(std::function<void()> fn, const std::string& what);

// How threads are started: std::thread unless replaced. Tests replace it to refuse threads as the
// system does under a thread limit, which a container running as root cannot be put under
// (RLIMIT_NPROC does not apply to root). The starter must start fn or throw std::system_error.
using ThreadStarter = std::function<std::thread(std::function<void()>)>;
// Replaces the starter for the whole process and returns the one it replaces; an empty starter
// restores std::thread. Threads already running are not affected.
ThreadStarter set_thread_starter(ThreadStarter starter);

}  // namespace fpg
