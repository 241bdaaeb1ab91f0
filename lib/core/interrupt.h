// Ctrl-C and SIGTERM for the commands that write (train, reshard, convert): the signal only sets a
// flag; the work stops at its next safe point, where it throws Interrupted, and the usual unwinding
// removes its staging, so nothing half-written is left and nothing committed is touched. Safe points:
// check_interrupt() between units of work (a training step, a batch of a reshard, a tensor of a
// conversion), every positional write (fs::pwrite_full refuses to write once interrupted) and every
// commit (check_interrupt() before the rename that puts an output in place). A second signal ends
// the process at once (its default action).
#pragma once

#include <string>

#include "core/error.h"

namespace fpg {

// The exit code of a run stopped by `signal`: 128 + signal, as a shell reports a process the signal
// killed (130 for SIGINT, 143 for SIGTERM).
ExitCode interrupted_exit_code(int signal);

// Work stopped by a signal. what(): what was kept, e.g. "nothing written; OUT unchanged".
struct Interrupted : Error {
  Interrupted(int signal, const std::string& what);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the handlers of SIGINT and SIGTERM (a process that never calls this is never interrupted).
void install_interrupt_handlers();
// Whether they are installed: work that must agree on a safe point across ranks (a training step)
// asks the others only then.
bool interrupt_handlers_installed() noexcept;

// The signal received since the handlers were installed, 0 if none. Async-signal-safe to set, cheap
// to read from any thread.
int interrupt_signal() noexcept;
inline bool interrupted() noexcept { return interrupt_signal() != 0; }

// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int signal);

// What check_interrupt's Interrupted says.
constexpr const char* kInterruptedStopped = "stopped";

// A safe point: throws Interrupted(kInterruptedStopped) once a signal arrived.
void check_interrupt();

// What a writer stopped before its commit kept: "nothing written; OUT unchanged" (`existed`: OUT
// was there before), or "nothing written; OUT not created".
std::string nothing_written(const std::string& out, bool existed);

// Runs body(); if it throws while a signal is pending (any error: a write refused because of the
// signal surfaces as a failed write), throws Interrupted(kept()) instead, after the detail of an
// Interrupted thrown with one ("stopped after step 3 of 10; " + kept()).
template <class Body, class Kept>
auto run_interruptible(Body&& body, Kept&& kept) -> decltype(body()) {
  try {
    return body();
  } catch (const Interrupted& e) {
    const std::string detail = e.what();
    throw Interrupted(e.signal(), detail == kInterruptedStopped ? kept() : detail + "; " + kept());
  } catch (const Error&) {
    if (!interrupted()) throw;
    throw Interrupted(interrupt_signal(), kept());
  } catch (const std::exception&) {
    if (!interrupted()) throw;
    throw Interrupted(interrupt_signal(), kept());
  }
}

}  // namespace fpg
