// Crash recovery of a checkpoint root (formats/fpckpt/recovery.h), each leftover built by hand as a
// kill would leave it: staging directories of dead saves (removed) beside a live one and a fresh one
// (kept), retention cut short, an older fpgather's half-deleted checkpoint, and committed
// checkpoints newer than `latest` (adopted if valid, set aside if not).
#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "catch.h"
#include "ckpt_test_util.h"
#include "formats/fpckpt/commit.h"
#include "formats/fpckpt/index_file.h"
#include "formats/fpckpt/recovery.h"
#include "formats/fpckpt/validate.h"
#include "tools/ckpt_fixture.h"

using namespace fpg;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return lstat(p.c_str(), &st) == 0;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void touch_file(const std::string& path) { std::ofstream(path) << "x"; }

// Sets a path's modification time `seconds` into the past.
void age(const std::string& path, long seconds) {
  timeval tv[2];
  gettimeofday(&tv[0], nullptr);
  tv[0].tv_sec -= seconds;
  tv[1] = tv[0];
  REQUIRE(utimes(path.c_str(), tv) == 0);
}

testing::FixtureOptions fixture() {
  testing::FixtureOptions o;
  o.dp = 2;
  o.state_layout = ckpt::StateLayout::model;
  o.write.compression = ckpt::parse_compression("none");
  return o;
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; });
}

}  // namespace

TEST_CASE("ckpt recovery: only dead saves' staging directories are removed", "[ckpt][recovery]") {
  test::CkptTempDir t("fpg-recovery");
  const std::string root = t.path;
  // A dead save: unlocked, a minute and more untouched.
  const std::string dead = root + "/.step-00000004.tmp-0123456789abcdef";
  REQUIRE(mkdir(dead.c_str(), 0755) == 0);
  touch_file(dead + "/rank-00000.h5");
  age(dead, 3600);
  // A live save: locked by its writer (this process holds the lock through another descriptor),
  // however old it looks.
  fpckpt::StagingDir live = fpckpt::begin_staging(root + "/step-00000006");
  age(live.path(), 3600);
  // A save that has only just begun (its directory may not be locked yet).
  const std::string young = root + "/.step-00000008.tmp-fedcba9876543210";
  REQUIRE(mkdir(young.c_str(), 0755) == 0);
  // Not ours by name: kept whatever its age.
  const std::string other = root + "/.keepme.tmp-123";
  REQUIRE(mkdir(other.c_str(), 0755) == 0);
  age(other, 3600);

  const auto done = fpckpt::recover_root(root);
  CHECK(!exists(dead));
  CHECK(exists(live.path()));
  CHECK(exists(young));
  CHECK(exists(other));
  CHECK(mentions(done, ".step-00000004.tmp-0123456789abcdef, the staging directory of a save that did not finish"));
  CHECK(done.size() == 1);
  // Once its writer is gone, the old one goes too.
  const std::string was_live = live.path();
  live = fpckpt::StagingDir();
  fpckpt::recover_root(root);
  CHECK(!exists(was_live));
}

TEST_CASE("ckpt recovery: retention renames before deleting, and a cut-short deletion is finished",
          "[ckpt][recovery]") {
  test::CkptTempDir t("fpg-recovery");
  const std::string root = t.path;
  for (int s = 1; s <= 3; ++s) testing::write_fixture(root + "/step-0000000" + std::to_string(s), fixture());
  fpckpt::update_latest(root, "step-00000003");
  CHECK(fpckpt::apply_retention(root, 1) == std::vector<std::string>{"step-00000001", "step-00000002"});
  CHECK(entries(root) == std::vector<std::string>{"latest", "step-00000003"});

  // What a kill during retention leaves: a renamed checkpoint partly deleted...
  testing::write_fixture(root + "/step-00000004", fixture());
  REQUIRE(rename((root + "/step-00000004").c_str(), (root + "/.step-00000004.deleting").c_str()) == 0);
  unlink((root + "/.step-00000004.deleting/index.h5").c_str());
  // ... and, from an fpgather that deleted in place, a checkpoint without its index.
  testing::write_fixture(root + "/step-00000005", fixture());
  unlink((root + "/step-00000005/index.h5").c_str());
  // Not a checkpoint's remains (a file no checkpoint holds): left alone.
  REQUIRE(mkdir((root + "/step-00000009").c_str(), 0755) == 0);
  touch_file(root + "/step-00000009/notes.txt");

  const auto done = fpckpt::recover_root(root);
  CHECK(entries(root) == std::vector<std::string>{"latest", "step-00000003", "step-00000009"});
  CHECK(mentions(done, "finished deleting .step-00000004.deleting"));
  CHECK(mentions(done, "removed step-00000005, a checkpoint left without index.h5"));
  CHECK(fpckpt::resolve_checkpoint(root) == root + "/step-00000003");
}

TEST_CASE("ckpt recovery: a newer committed checkpoint is adopted if valid, set aside if not", "[ckpt][recovery]") {
  test::CkptTempDir t("fpg-recovery");
  const std::string root = t.path;
  testing::write_fixture(root + "/step-00000002", fixture());
  fpckpt::update_latest(root, "step-00000002");
  // Killed between the rename and `latest`: step 4 is complete, `latest` still names step 2.
  testing::write_fixture(root + "/step-00000004", fixture());
  // And step 6 is newer still, but its index no longer matches its checksum.
  testing::write_fixture(root + "/step-00000006", fixture());
  {
    const std::string index = root + "/step-00000006/" + fpckpt::kIndexFile;
    std::ifstream in(index, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const size_t at = bytes.find("\"cursor\": 1792");
    REQUIRE(at != std::string::npos);
    bytes[at + 13] = '3';
    std::ofstream(index, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const auto done = fpckpt::recover_root(root);
  CHECK(fpckpt::resolve_checkpoint(root) == root + "/step-00000004");
  CHECK(mentions(done, "set step-00000006 aside as .step-00000006.invalid"));
  CHECK(mentions(done, "index_checksum"));
  CHECK(mentions(done, "adopted step-00000004 as latest"));
  CHECK(exists(root + "/.step-00000006.invalid/index.h5"));
  CHECK(entries(root) ==
        std::vector<std::string>{".step-00000006.invalid", "latest", "step-00000002", "step-00000004"});
  // Nothing more to do the second time.
  CHECK(fpckpt::recover_root(root).empty());

  // No `latest` at all (its first write failed): the newest valid checkpoint becomes it.
  unlink((root + "/latest").c_str());
  fpckpt::recover_root(root);
  CHECK(fpckpt::resolve_checkpoint(root) == root + "/step-00000004");
}
