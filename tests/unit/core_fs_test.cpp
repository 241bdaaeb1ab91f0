// The file-system seam (core/fs.h) on a real temporary directory: positional writes, atomic
// replacement, fsync of files and directories, checks that do or do not follow links, removal that
// never follows a link out of the tree, and errors that name the file and the cause.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "catch.h"
#include "core/error.h"
#include "core/fs.h"

using namespace fpg;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/fpg-fs-test.XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_tree(path); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

std::string contents(const std::string& path) { return fs::read_small_file(path, 1 << 20); }

void put(const std::string& path, const std::string& text) {
  const int fd = fs::create_file(path);
  fs::pwrite_all(fd, path, 0, text.data(), text.size());
  fs::close_fd(fd, path);
}

// Names in `dir` other than . and ..
size_t entries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ++n;
    }
    closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("fs: positional writes land at their offsets, in any order", "[fs]") {
  TempDir t;
  const std::string path = t.path + "/data.bin";
  const int fd = fs::create_file(path);
  fs::pwrite_all(fd, path, 6, "world", 5);
  fs::pwrite_all(fd, path, 0, "hello ", 6);
  CHECK(fs::pwrite_full(fd, 11, "!", 1) == 0);
  fs::start_writeback(fd);
  fs::fsync_fd(fd, path);
  fs::close_fd(fd, path);
  fs::fsync_file(path);
  CHECK(contents(path) == "hello world!");
  CHECK(fs::is_regular_file(path));
  // A new file is never an existing one.
  CHECK(error_of([&] { fs::create_file(path); }) == path + ": cannot create: File exists");
}

TEST_CASE("fs: failed writes name the file, the range and the cause", "[fs]") {
  TempDir t;
  const std::string path = t.path + "/ro.bin";
  put(path, "abc");
  const int ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(ro >= 0);
  CHECK(error_of([&] { fs::pwrite_all(ro, path, 8, "xyz", 3); }) ==
        path + ": write of bytes [8, 11) failed: Bad file descriptor");
  CHECK(fs::pwrite_full(ro, 0, "x", 1) == EBADF);
  ::close(ro);

  SECTION("a full device") {
    const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    if (full >= 0) {
      CHECK(error_of([&] { fs::pwrite_all(full, "/dev/full", 0, "abcd", 4); }) ==
            "/dev/full: write of bytes [0, 4) failed: no space left on device");
      ::close(full);
    }
  }
  SECTION("the file size limit") {
    struct rlimit old {};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
    const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 4096;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    const std::string big = t.path + "/big.bin";
    const int fd = fs::create_file(big);
    const std::string e = error_of([&] { fs::pwrite_all(fd, big, 4000, std::string(200, 'x').data(), 200); });
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    ::close(fd);
    // The bytes below the limit were written; the message names the rest.
    CHECK(e == big + ": write of bytes [4096, 4200) failed: file size limit exceeded");
  }
}

TEST_CASE("fs: write_file_atomic replaces the file whole and leaves no temporary", "[fs]") {
  TempDir t;
  const std::string path = t.path + "/latest";
  fs::write_file_atomic(path, "step-1\n");
  CHECK(contents(path) == "step-1\n");
  // A second name for the old file keeps the old contents: the new file was renamed over the
  // name, never written into the old file in place.
  const std::string old_link = t.path + "/old";
  REQUIRE(::link(path.c_str(), old_link.c_str()) == 0);
  fs::write_file_atomic(path, "step-22\n");
  CHECK(contents(path) == "step-22\n");
  CHECK(contents(old_link) == "step-1\n");
  CHECK(entries(t.path) == 2);  // latest and old: no ".latest.tmp-*" left behind

  const std::string missing = t.path + "/no-such-dir/latest";
  CHECK(error_of([&] { fs::write_file_atomic(missing, "x"); }) ==
        missing + ": cannot create a temporary file in " + t.path + "/no-such-dir: No such file or directory");

  std::string tmp;
  const int fd = fs::create_temp_beside(path, tmp);
  ::close(fd);
  CHECK(fs::split_path(tmp).first == t.path);
  CHECK(fs::split_path(tmp).second.rfind(".latest.tmp-", 0) == 0);
  fs::rename_into_place(tmp, path);
  CHECK(contents(path).empty());
  CHECK(error_of([&] { fs::rename_into_place(tmp, path); }) ==
        path + ": cannot rename " + tmp + " into place: No such file or directory");
}

TEST_CASE("fs: fsync of a real directory, errors naming a missing one", "[fs]") {
  TempDir t;
  put(t.path + "/f", "x");
  fs::fsync_directory(t.path);
  const std::string missing = t.path + "/gone";
  CHECK(error_of([&] { fs::fsync_directory(missing); }) ==
        missing + ": cannot open directory to fsync: No such file or directory");
  CHECK(error_of([&] { fs::fsync_file(missing); }) == missing + ": cannot open for fsync: No such file or directory");
}

TEST_CASE("fs: existence and kind, with and without following links", "[fs]") {
  TempDir t;
  const std::string dir = t.path + "/d", file = t.path + "/f", to_dir = t.path + "/ld", dangling = t.path + "/lx";
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  put(file, "x");
  REQUIRE(::symlink(dir.c_str(), to_dir.c_str()) == 0);
  REQUIRE(::symlink((t.path + "/nothing").c_str(), dangling.c_str()) == 0);
  CHECK(fs::is_directory(dir));
  CHECK(fs::is_directory(to_dir));
  CHECK_FALSE(fs::is_directory(to_dir, false));
  CHECK(fs::is_regular_file(file, false));
  CHECK_FALSE(fs::is_regular_file(dir));
  CHECK(fs::exists(dangling));
  CHECK_FALSE(fs::exists(dangling, true));
  CHECK_FALSE(fs::exists(t.path + "/nothing"));
}

TEST_CASE("fs: remove_tree removes links, never what they point to", "[fs]") {
  TempDir outside;
  const std::string kept_dir = outside.path + "/kept", kept_file = outside.path + "/kept.txt";
  REQUIRE(::mkdir(kept_dir.c_str(), 0755) == 0);
  put(kept_dir + "/inner.txt", "inner");
  put(kept_file, "file");

  TempDir t;
  const std::string tree = t.path + "/tree";
  REQUIRE(::mkdir(tree.c_str(), 0755) == 0);
  REQUIRE(::mkdir((tree + "/sub").c_str(), 0755) == 0);
  put(tree + "/sub/a", "a");
  put(tree + "/b", "b");
  REQUIRE(::symlink(kept_dir.c_str(), (tree + "/sub/link-to-dir").c_str()) == 0);
  REQUIRE(::symlink(kept_file.c_str(), (tree + "/link-to-file").c_str()) == 0);

  // A link given as the tree itself is removed as a link.
  const std::string top_link = t.path + "/top-link";
  REQUIRE(::symlink(kept_dir.c_str(), top_link.c_str()) == 0);
  fs::remove_tree(top_link);
  CHECK_FALSE(fs::exists(top_link));
  CHECK(contents(kept_dir + "/inner.txt") == "inner");

  fs::remove_tree(tree);
  CHECK_FALSE(fs::exists(tree));
  CHECK(contents(kept_dir + "/inner.txt") == "inner");
  CHECK(contents(kept_file) == "file");
  CHECK(entries(t.path) == 0);
  fs::remove_tree(tree);  // nothing there: nothing to do
}

TEST_CASE("fs: copy_file and read_small_file name the file they refuse", "[fs]") {
  TempDir t;
  const std::string from = t.path + "/config.json", to = t.path + "/copy.json";
  put(from, std::string(100, 'c'));
  fs::copy_file(from, to);
  CHECK(contents(to) == std::string(100, 'c'));
  CHECK(error_of([&] { fs::copy_file(from, to); }) == to + ": cannot create: File exists");
  CHECK(error_of([&] { fs::read_small_file(from, 10); }) == from + ": 100 bytes, more than the 10 read here");
  CHECK(error_of([&] { fs::read_small_file(t.path, 10); }) == t.path + ": not a regular file");
  CHECK(fs::join_path(".", "x") == "x");
  CHECK(fs::join_path("/a/", "x") == "/a/x");
  CHECK(fs::split_path("/x") == std::make_pair(std::string("/"), std::string("x")));
  CHECK(fs::split_path("x") == std::make_pair(std::string("."), std::string("x")));
}

namespace {

// Pages of fd's first `bytes` in the page cache.
size_t resident_pages(int fd, size_t bytes) {
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  REQUIRE(::mincore(map, bytes, in.data()) == 0);
  ::munmap(map, bytes);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

}  // namespace

TEST_CASE("fs: will_need asks for the whole range, past the device's read-ahead window", "[fs]") {
  TempDir d;
  const std::string path = d.path + "/f";
  // Four times the most one request reads on this disk, and at least 32 MiB.
  const int probe = fs::create_file(path);
  const uint64_t piece = fs::will_need_piece(probe);
  CHECK(piece >= (uint64_t{128} << 10));
  const size_t bytes = static_cast<size_t>(std::max<uint64_t>(4 * piece, uint64_t{32} << 20));
  std::vector<char> data(bytes, 'x');
  fs::pwrite_all(probe, path, 0, data.data(), data.size());
  fs::fsync_fd(probe, path);
  fs::close_fd(probe, path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const size_t pages = resident_pages(fd, bytes), all = bytes / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (pages > all / 2) {
    // tmpfs and some overlay file systems keep their pages: nothing here can show what was asked.
    WARN("the page cache keeps " << path << " (" << pages << " of " << all << " pages): not checked");
    ::close(fd);
    return;
  }
  fs::will_need(fd, 0, bytes);
  // The reads are asynchronous: wait for them (a single request would stop at one window for good).
  size_t now = 0;
  for (int i = 0; i < 200 && (now = resident_pages(fd, bytes)) < all; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::close(fd);
  CHECK(now == all);
}
