// Staging (core/staging.h): the names writers give it, and the removal of a dead writer's — only
// ours, a minute old, its lock free — beside one target or in a checkpoint root; and the helpers of
// core/interrupt.h that need no signal.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <ctime>
#include <string>

#include "catch.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/interrupt.h"
#include "core/staging.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-staging-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

void age(const std::string& path, long seconds) {
  const time_t t = std::time(nullptr) - seconds;
  const struct timeval tv[2] = {{t, 0}, {t, 0}};
  REQUIRE(lutimes(path.c_str(), tv) == 0);
}

std::string make_dir(const std::string& path, long old) {
  REQUIRE(mkdir(path.c_str(), 0755) == 0);
  fs::write_file_atomic(path + "/data", "x");
  age(path, old);
  return path;
}

std::string make_file(const std::string& path, long old) {
  const int fd = fs::create_file(path);
  fs::close_fd(fd, path);
  age(path, old);
  return path;
}

}  // namespace

TEST_CASE("staging names: each writer's form, after its target", "[core][staging]") {
  CHECK(fs::staging_target(".step-00000004.tmp-0123456789abcdef", true) == "step-00000004");
  CHECK(fs::staging_target(".out.fpgather-staging-Ab12Cd", true) == "out");
  CHECK(fs::staging_target(".m.safetensors.tmp-123456789", false) == "m.safetensors");
  CHECK(fs::staging_target(".latest.tmp-42", false) == "latest");
  // Not a writer's: another length, a file where a directory is made, no dot, no target.
  CHECK(fs::staging_target(".keepme.tmp-123", true).empty());
  CHECK(fs::staging_target(".x.tmp-0123456789abcdef", false).empty());
  CHECK(fs::staging_target(".x.tmp-12ab", false).empty());
  CHECK(fs::staging_target(".out.fpgather-staging-Ab12C", true).empty());
  CHECK(fs::staging_target("x.tmp-0123456789abcdef", true).empty());
  CHECK(fs::staging_target("..tmp-0123456789abcdef", true).empty());
}

TEST_CASE("stale staging beside a target: only the dead writers' of that target go", "[core][staging]") {
  TempDir t;
  const std::string target = t.path + "/out";
  const std::string dead_dir = make_dir(t.path + "/.out.tmp-0123456789abcdef", 3600);
  const std::string dead_convert = make_dir(t.path + "/.out.fpgather-staging-Ab12Cd", 3600);
  const std::string young = make_dir(t.path + "/.out.tmp-fedcba9876543210", 0);
  const std::string other = make_dir(t.path + "/.other.tmp-0123456789abcdef", 3600);
  const std::string live = make_dir(t.path + "/.out.fpgather-staging-Zz99Yy", 3600);
  const int lock = ::open(live.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fs::lock_staging(lock));
  age(live, 3600);

  const auto removed = fs::remove_stale_staging_beside(target + "/");
  CHECK(removed == std::vector<std::string>{".out.fpgather-staging-Ab12Cd", ".out.tmp-0123456789abcdef"});
  CHECK(!fs::exists(dead_dir));
  CHECK(!fs::exists(dead_convert));
  CHECK(fs::exists(young));
  CHECK(fs::exists(other));
  CHECK(fs::exists(live));
  ::close(lock);  // its writer is gone: now it goes too
  CHECK(fs::remove_if_stale_staging(live));
  CHECK(!fs::exists(live));
}

TEST_CASE("stale staging: a temporary file, never a link or what a link points to", "[core][staging]") {
  TempDir t;
  const std::string dead = make_file(t.path + "/.m.safetensors.tmp-123", 3600);
  const std::string keep = make_file(t.path + "/precious", 3600);
  const std::string link = t.path + "/.m.safetensors.tmp-456";
  REQUIRE(symlink(keep.c_str(), link.c_str()) == 0);
  age(link, 3600);
  CHECK(fs::remove_stale_staging_beside(t.path + "/m.safetensors") == std::vector<std::string>{".m.safetensors.tmp-123"});
  CHECK(!fs::exists(dead));
  CHECK(fs::exists(link));
  CHECK(fs::exists(keep));
  // A temporary file being written holds its lock: it is not stale, however old it looks.
  std::string tmp;
  const int fd = fs::create_temp_beside(t.path + "/n.safetensors", tmp);
  age(tmp, 3600);
  CHECK(!fs::remove_if_stale_staging(tmp));
  fs::close_fd(fd, tmp);
  CHECK(fs::remove_if_stale_staging(tmp));
}

TEST_CASE("interrupt: without a signal, work and errors pass through", "[core][interrupt]") {
  CHECK(!interrupted());
  CHECK(run_interruptible([] { return 7; }, [] { return std::string("kept"); }) == 7);
  CHECK_THROWS_AS(run_interruptible([]() -> int { throw FormatError("disk"); }, [] { return std::string("kept"); }),
                  FormatError);
  CHECK_NOTHROW(check_interrupt());
  CHECK(nothing_written("out", false) == "nothing written; out not created");
  CHECK(nothing_written("out", true) == "nothing written; out unchanged");
  CHECK(static_cast<int>(interrupted_exit_code(2)) == 130);
  CHECK(static_cast<int>(interrupted_exit_code(15)) == 143);
  CHECK(signal_name(2) == "SIGINT");
  CHECK(signal_name(15) == "SIGTERM");
  // An Interrupted with a detail keeps it before what was kept.
  try {
    run_interruptible([]() -> int { throw Interrupted(15, "stopped after step 3 of 10"); },
                      [] { return std::string("kept ckpt"); });
    FAIL("no throw");
  } catch (const Interrupted& e) {
    CHECK(std::string(e.what()) == "stopped after step 3 of 10; kept ckpt");
    CHECK(e.signal() == 15);
    CHECK(static_cast<int>(e.code()) == 143);
  }
}
