// core/progress.h: the line a bar draws (fitted to the width, steps or bytes, time left), and what a
// terminal shows when other lines are printed while it is drawn (the bar never shares their line).
#include "core/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "catch.h"
#include "core/log.h"

using fpg::Progress;
using fpg::ProgressUnit;

namespace {

// The lines a terminal ends up showing for `bytes`: \r returns to the first column, ESC[K erases to
// the end of the line, \n starts a new one. The last element is the line the cursor is on.
std::vector<std::string> screen(const std::string& bytes) {
  std::vector<std::string> lines{""};
  size_t col = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    std::string& line = lines.back();
    if (c == '\r') {
      col = 0;
    } else if (c == '\n') {
      lines.emplace_back();
      col = 0;
    } else if (c == '\033' && bytes.compare(i, 3, "\033[K") == 0) {
      line.resize(std::min(line.size(), col));
      i += 2;
    } else {
      if (col < line.size()) line[col] = c;
      else line.push_back(c);
      ++col;
    }
  }
  return lines;
}

// Runs `body` with stderr going to a file, and returns what was written to it.
template <typename Body>
std::string capture_stderr(Body body) {
  char path[] = "/tmp/fpgather-progress-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  body();
  std::fflush(stderr);
  dup2(saved, STDERR_FILENO);
  close(saved);
  close(fd);
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  std::remove(path);
  return s.str();
}

void pause_past_redraw_interval() { std::this_thread::sleep_for(std::chrono::milliseconds(120)); }

}  // namespace

TEST_CASE("a progress line shows the label, a bar, done/total and the time left", "[progress]") {
  const Progress p("train", 200, false, ProgressUnit::steps);
  CHECK(p.render(50, 0, 10.0, 80) == "train [##########..............................]  50/200 steps   25%  ETA 0:30");
  CHECK(p.render(0, 0, 0.0, 80).find("  0/200 steps    0%  ETA -:--") != std::string::npos);
  CHECK(p.render(200, 0, 4.0, 80).find("200/200 steps  100%  ETA 0:00") != std::string::npos);
  CHECK(p.render(1, 0, 10.0, 80).find("ETA 33:10") != std::string::npos);
  const Progress hours("x", 1000, false, ProgressUnit::steps);
  CHECK(hours.render(1, 0, 10.0, 80).find("ETA 2:46:30") != std::string::npos);
  // resumed at 100: the rate is this run's, 50 steps in 50 s, so 50 s left
  CHECK(p.render(150, 100, 50.0, 80).find("150/200 steps   75%  ETA 0:50") != std::string::npos);
}

TEST_CASE("a byte progress line counts in the total's unit", "[progress]") {
  const Progress gb("export", 4'500'000'000, false);
  CHECK(gb.render(1'200'000'000, 0, 1.0, 80).find("1.2/4.5 GB") != std::string::npos);
  const Progress mb("export", 12'000'000, false);
  CHECK(mb.render(3'000'000, 0, 1.0, 80).find(" 3.0/12.0 MB") != std::string::npos);
  const Progress b("export", 500, false);
  CHECK(b.render(7, 0, 1.0, 80).find("  7/500 B") != std::string::npos);
}

TEST_CASE("a progress line fits the terminal's width without wrapping", "[progress]") {
  const Progress p("reshard", 123'456'789'012, false);
  for (int width = 0; width <= 200; ++width) {
    const std::string line = p.render(23'456'789'012, 0, 12.0, width);
    INFO("width " << width << ": '" << line << "'");
    CHECK(line.size() <= static_cast<size_t>(width > 0 ? width - 1 : 0));
  }
  // the bar goes first, then the time left, then the percentage
  CHECK(p.render(23'456'789'012, 0, 12.0, 48).find('[') == std::string::npos);
  CHECK(p.render(23'456'789'012, 0, 12.0, 48).find("ETA") != std::string::npos);
  CHECK(p.render(23'456'789'012, 0, 12.0, 34).find("ETA") == std::string::npos);
  CHECK(p.render(23'456'789'012, 0, 12.0, 34).find('%') != std::string::npos);
  CHECK(p.render(23'456'789'012, 0, 12.0, 200).size() < 100);  // the bar stops growing at 40 columns
}

TEST_CASE("lines printed while a bar is drawn are never on its line, and finish leaves the line empty",
          "[progress]") {
  const std::string out = capture_stderr([] {
    Progress p("work", 4, true, ProgressUnit::steps);
    Progress second("other", 4, true, ProgressUnit::steps);  // one bar at a time holds the line
    pause_past_redraw_interval();
    p.advance(1);
    second.advance(1);
    fpg::write_above_progress([] { std::fprintf(stderr, "a line of output\n"); });
    pause_past_redraw_interval();
    p.advance(1);
    fpg::init_logging("warn");
    spdlog::warn("a log line");
    p.advance(2);
    p.finish();
    p.advance(0);  // after finish: nothing more is drawn
  });
  INFO(out);
  CHECK(out.find("1/4 steps") != std::string::npos);  // drawn before the output line
  CHECK(out.find("2/4 steps") != std::string::npos);  // and again below it
  CHECK(out.find("other") == std::string::npos);
  const auto lines = screen(out);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "a line of output");
  CHECK(lines[1] == "fpgather: warning: a log line");
  CHECK(lines[2].empty());
}

TEST_CASE("a disabled bar draws nothing", "[progress]") {
  const std::string out = capture_stderr([] {
    Progress p("work", 2, false, ProgressUnit::steps);
    pause_past_redraw_interval();
    p.advance(1);
    fpg::write_above_progress([] { std::fprintf(stderr, "plain\n"); });
    p.advance(1);
  });
  CHECK(out == "plain\n");
}
