// The --metrics file (app/train/metrics_file.h): a new run refuses an existing file unless it
// replaces it; a resumed run keeps the steps before it, cuts the later ones and appends.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "app/train/metrics_file.h"
#include "catch.h"
#include "core/error.h"
#include "core/fs.h"

using namespace fpg;
using app::train::MetricsFile;
using app::train::MetricsMode;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-metrics-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

void write_steps(MetricsFile& f, uint64_t from, uint64_t to) {
  for (uint64_t s = from; s < to; ++s) {
    app::train::StepMetrics m;
    m.step = s;
    m.loss = 1.0 / static_cast<double>(s + 1);
    f.write(m);
  }
}

std::string steps_of(const std::string& path) {
  std::ifstream in(path);
  std::string line, out;
  while (std::getline(in, line)) {
    const size_t at = line.find("\"step\":");
    out += (out.empty() ? "" : ",") + line.substr(at + 7, line.find_first_of(",}", at) - at - 7);
  }
  return out;
}

}  // namespace

TEST_CASE("metrics file: refused, replaced, resumed", "[train][metrics]") {
  TempDir t;
  const std::string path = t.path + "/m.jsonl";
  {
    MetricsFile f(path, MetricsMode::create);
    write_steps(f, 0, 6);
    f.close();
  }
  CHECK(steps_of(path) == "0,1,2,3,4,5");
  CHECK_THROWS_AS(MetricsFile(path, MetricsMode::create), UsageError);
  {
    // Resumed at step 4 (the run went on to 5 past its checkpoint): 4 and 5 are cut, then appended.
    MetricsFile f(path, MetricsMode::resume);
    f.start_at(4);
    write_steps(f, 4, 8);
    f.close();
  }
  CHECK(steps_of(path) == "0,1,2,3,4,5,6,7");
  {
    // A file with a torn last line (a crash mid-write): cut there.
    std::ofstream(path, std::ios::app) << "{\"step\":8,\"lo";
    MetricsFile f(path, MetricsMode::resume);
    f.start_at(9);
    write_steps(f, 8, 9);
    f.close();
  }
  CHECK(steps_of(path) == "0,1,2,3,4,5,6,7,8");
  {
    MetricsFile f(path, MetricsMode::replace);
    write_steps(f, 0, 2);
    f.close();
  }
  CHECK(steps_of(path) == "0,1");
  {
    const std::string fresh = t.path + "/new.jsonl";  // a resume without a file: a new one
    MetricsFile f(fresh, MetricsMode::resume);
    f.start_at(3);
    write_steps(f, 3, 5);
    f.close();
    CHECK(steps_of(fresh) == "3,4");
  }
}
