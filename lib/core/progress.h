// A progress display for terminals: one line on stderr showing the label, a bar fitted to the terminal's
// width, done/total (steps, or bytes) and an estimate of the time left. Drawn only when enabled (the
// caller checks progress_terminal() and --no-progress), throttled to ten redraws a second, and safe to
// advance from several threads. Other lines printed while a bar is shown go through
// write_above_progress(), which erases the bar first and draws it again below them; finish() erases it
// for good, so that nothing is drawn after the command's result.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "core/error.h"

namespace fpg {

enum class ProgressUnit { bytes, steps };

// True when stderr is a terminal that can redraw a line (not TERM=dumb).
bool progress_terminal();

// Runs `write` (which prints whole lines on stdout or stderr, and must not log: the terminal line is held)
// with the progress line erased, then draws the bar again under what it printed. Just runs `write` when
// no bar is shown.
void write_above_progress(const std::function<void()>& write);

// The progress of work a library caller started, reported to the caller's callback: while one is
// installed on a thread, every Progress constructed on that thread reports each advance() to it —
// label, amount done and total (0 while not known) — whether or not the terminal shows a bar. Calls
// are serialized, and within one Progress `done` never decreases. An exception thrown by the callback
// stops the work: that advance() and every later one under the same observer throw ProgressStopped
// instead (the usual unwinding removes what was staged), and failure() holds the callback's exception
// for the caller to rethrow once the work has unwound.
class ProgressObserver {
 public:
  using Callback = std::function<void(const std::string& label, uint64_t done, uint64_t total)>;
  explicit ProgressObserver(Callback callback);  // installs it on this thread (the previous one is restored after)
  ~ProgressObserver();
  ProgressObserver(const ProgressObserver&) = delete;
  ProgressObserver& operator=(const ProgressObserver&) = delete;

  // What the callback threw; null while it has thrown nothing.
  std::exception_ptr failure() const;

  struct State;

 private:
  std::shared_ptr<State> state_, previous_;
};

// What advance() throws once the observer's callback has failed.
struct ProgressStopped : Error {
  ProgressStopped() : Error(ExitCode::internal, "stopped: the progress callback failed") {}
};

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled, ProgressUnit unit = ProgressUnit::bytes);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Throws ProgressStopped where an observer's callback fails (ProgressObserver).
  void advance(uint64_t amount);
  // The total, where it is known only once the work is planned (after a phase that reads the input).
  void set_total(uint64_t total) { total_ = total; }
  // Work resumed part way: `done` of the total were done before this run. Shown as done, but not counted
  // in the rate that the estimate of the time left comes from. Called before the first advance().
  void resume_at(uint64_t done);
  // Shows "LABEL: WHAT ..." in place of the bar at once (a setup step, a save: work that advances
  // nothing), until the next advance() draws the bar again. The time spent in phases does not count in
  // the rate of the estimate.
  void phase(const std::string& what);
  // Erases the bar and stops drawing it; the line is left empty for what the command prints next.
  void finish();

  // The line as drawn for `done` after `elapsed` seconds (of which `resumed` were done before), at most `width` - 1 columns (a line that
  // filled the last column would wrap on some terminals).
  std::string render(uint64_t done, uint64_t resumed, double elapsed, int width) const;

 private:
  friend void write_above_progress(const std::function<void()>&);
  void draw_locked();
  void erase_locked();
  void report(uint64_t done);

  std::string label_;
  std::atomic<uint64_t> total_;
  ProgressUnit unit_;
  std::atomic<bool> owner_{false};  // this bar holds the terminal line (at most one does)
  std::atomic<uint64_t> done_{0};
  uint64_t resumed_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool shown_ = false;
  std::string phase_;                        // shown instead of the bar while set
  std::atomic<bool> in_phase_{false};
  std::chrono::steady_clock::time_point phase_start_;
  double phase_seconds_ = 0;                 // spent in phases that have ended
  std::shared_ptr<ProgressObserver::State> observer_;  // installed on the constructing thread, if any
  uint64_t reported_ = 0;                              // the largest `done` reported to it
};

}  // namespace fpg
