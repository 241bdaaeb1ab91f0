#include "core/progress.h"

#include "core/printable.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace fpg {
namespace {

// The terminal line: at most one bar draws on it, and every write to it holds this mutex.
std::mutex g_line_mu;
Progress* g_line_owner = nullptr;

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kMaxBar = 40, kMinBar = 10;

int terminal_width() {
  winsize ws{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    const int c = std::atoi(columns);
    if (c > 0) return c;
  }
  return 80;
}

// "1.2/4.5 GB": both in the unit of the total, as the rest of fpgather prints sizes (powers of 1000).
std::string byte_count(uint64_t done, uint64_t total) {
  static const char* const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double scale = 1;
  size_t u = 0;
  while (u + 1 < sizeof units / sizeof *units && static_cast<double>(total) >= scale * 1000) scale *= 1000, ++u;
  char buf[64];
  // done padded to the total's width, so that the bar keeps its length
  if (u == 0) {
    const int w = std::snprintf(nullptr, 0, "%llu", static_cast<unsigned long long>(total));
    std::snprintf(buf, sizeof buf, "%*llu/%llu B", w, static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(total));
  } else {
    const int w = std::snprintf(nullptr, 0, "%.1f", static_cast<double>(total) / scale);
    std::snprintf(buf, sizeof buf, "%*.1f/%.1f %s", w, static_cast<double>(done) / scale,
                  static_cast<double>(total) / scale, units[u]);
  }
  return buf;
}

std::string duration(double seconds) {
  const auto s = static_cast<unsigned long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%llu:%02llu:%02llu", s / 3600, s / 60 % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%llu:%02llu", s / 60, s % 60);
  return buf;
}

}  // namespace

struct ProgressObserver::State {
  Callback callback;
  std::mutex mu;  // one report at a time
  std::atomic<bool> failed{false};
  std::exception_ptr failure;  // set once, under mu, before failed
};

namespace {
thread_local std::shared_ptr<ProgressObserver::State> t_observer;
}  // namespace

ProgressObserver::ProgressObserver(Callback callback) : state_(std::make_shared<State>()), previous_(t_observer) {
  state_->callback = std::move(callback);
  t_observer = state_;
}

ProgressObserver::~ProgressObserver() { t_observer = previous_; }

std::exception_ptr ProgressObserver::failure() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->failure;
}

void Progress::report(uint64_t done) {
  ProgressObserver::State& o = *observer_;
  if (o.failed) throw ProgressStopped();
  std::lock_guard<std::mutex> lock(o.mu);
  if (o.failed) throw ProgressStopped();
  if (done <= reported_) return;  // a later advance on another thread was reported first
  reported_ = done;
  try {
    o.callback(label_, done, total_.load());
  } catch (...) {
    o.failure = std::current_exception();
    o.failed = true;
    throw ProgressStopped();
  }
}

bool progress_terminal() {
  const char* term = std::getenv("TERM");
  return isatty(STDERR_FILENO) && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

void write_above_progress(const std::function<void()>& write) {
  std::lock_guard<std::mutex> lock(g_line_mu);
  Progress* bar = g_line_owner != nullptr && g_line_owner->shown_ ? g_line_owner : nullptr;
  if (bar != nullptr) bar->erase_locked();
  write();
  std::fflush(stdout);  // the lines reach the terminal before the bar is drawn under them
  if (bar != nullptr) bar->draw_locked();
}

Progress::Progress(std::string label, uint64_t total, bool enabled, ProgressUnit unit)
    : label_(std::move(label)), total_(total), unit_(unit), start_(std::chrono::steady_clock::now()),
      last_draw_(start_), observer_(t_observer) {
  if (!enabled) return;
  std::lock_guard<std::mutex> lock(g_line_mu);
  if (g_line_owner == nullptr) g_line_owner = this, owner_ = true;
}

Progress::~Progress() { finish(); }

void Progress::finish() {
  if (!owner_) return;
  std::lock_guard<std::mutex> lock(g_line_mu);
  erase_locked();
  g_line_owner = nullptr;
  owner_ = false;
}

void Progress::phase(const std::string& what) {
  if (!owner_) return;
  std::lock_guard<std::mutex> lock(g_line_mu);
  if (!owner_) return;
  if (!in_phase_) phase_start_ = std::chrono::steady_clock::now();
  phase_ = printable(what);  // it may name files
  in_phase_ = true;
  draw_locked();
}

void Progress::advance(uint64_t amount) {
  const uint64_t done = done_.fetch_add(amount) + amount;
  if (observer_) report(done);
  if (!owner_) return;
  if (in_phase_) {  // the phase has ended: the bar again, at once
    std::lock_guard<std::mutex> lock(g_line_mu);
    if (!owner_ || !in_phase_) return;
    phase_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - phase_start_).count();
    phase_.clear();
    in_phase_ = false;
    draw_locked();
    return;
  }
  std::unique_lock<std::mutex> lock(g_line_mu, std::try_to_lock);
  if (!lock.owns_lock() || !owner_) return;  // another thread is drawing, or the bar has finished
  if (std::chrono::steady_clock::now() - last_draw_ < kRedrawInterval) return;
  draw_locked();
}

void Progress::resume_at(uint64_t done) {
  resumed_ = done;
  done_.store(done);
}

void Progress::draw_locked() {
  const auto now = std::chrono::steady_clock::now();
  last_draw_ = now;
  const int width = terminal_width();
  std::string text;
  if (in_phase_) {
    text = label_ + ": " + phase_ + " ...";
    if (width > 1 && text.size() > static_cast<size_t>(width - 1)) text.resize(static_cast<size_t>(width - 1));
  } else {
    text = render(done_.load(), resumed_, std::chrono::duration<double>(now - start_).count() - phase_seconds_, width);
  }
  const std::string line = "\r" + text + "\033[K";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  shown_ = true;
}

void Progress::erase_locked() {
  if (!shown_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

std::string Progress::render(uint64_t done, uint64_t resumed, double elapsed, int width) const {
  const uint64_t total = total_.load();  // set_total may change it while a phase is shown
  done = std::min(done, total);
  resumed = std::min(resumed, done);
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  std::string count;
  if (unit_ == ProgressUnit::steps) {  // done padded to the total's width, so that the bar keeps its length
    const std::string all = std::to_string(total), now = std::to_string(done);
    count = std::string(all.size() - now.size(), ' ') + now + "/" + all + " steps";
  } else {
    count = byte_count(done, total);
  }
  char percent[16];
  std::snprintf(percent, sizeof percent, "%3d%%", static_cast<int>(frac * 100));
  // The time left at this run's mean rate so far; unknown until something is done.
  const uint64_t ran = done - resumed;
  const std::string eta =
      "ETA " + (ran > 0 && elapsed > 0 ? duration(elapsed * static_cast<double>(total - done) / static_cast<double>(ran))
                                       : "-:--");

  const size_t columns = width > 1 ? static_cast<size_t>(width - 1) : 0;
  // The parts that do not fit are dropped from the least to the most telling: bar, ETA, percentage.
  std::string tail = count + "  " + percent + "  " + eta;
  const size_t fixed = label_.size() + 1 + tail.size();
  if (fixed + 3 + kMinBar <= columns) {
    const size_t bar = std::min<size_t>(kMaxBar, columns - fixed - 3);
    const auto filled = static_cast<size_t>(frac * static_cast<double>(bar));
    return label_ + " [" + std::string(filled, '#') + std::string(bar - filled, '.') + "] " + tail;
  }
  for (const std::string& t : {tail, count + "  " + percent, count}) {
    if (label_.size() + 1 + t.size() <= columns) return label_ + " " + t;
  }
  return (label_ + " " + count).substr(0, columns);
}

}  // namespace fpg
