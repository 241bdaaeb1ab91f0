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
#include <functional>
#include <string>

namespace fpg {

enum class ProgressUnit { bytes, steps };

// True when stderr is a terminal that can redraw a line (not TERM=dumb).
bool progress_terminal();

// Runs `write` (which prints whole lines on stdout or stderr, and must not log: the terminal line is held)
// with the progress line erased, then draws the bar again under what it printed. Just runs `write` when
// no bar is shown.
void write_above_progress(const std::function<void()>& write);

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled, ProgressUnit unit = ProgressUnit::bytes);
  ~Progress();  // finish()
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

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
};

}  // namespace fpg
