#include "cmd/bench/reshard_bench.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cmd/bench/io_bench.h"
#include "formats/fpckpt/commit.h"

namespace fpg::bench {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Child {
  double seconds = 0;
  uint64_t peak_rss = 0;  // bytes
};

// Runs `args` with stdout to `out_path` (stderr inherited); InternalError unless it exits 0.
Child run_child(const std::vector<std::string>& args, const std::string& out_path) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const double t0 = now();
  const pid_t pid = fork();
  if (pid < 0) throw InternalError(std::string("bench reshard: fork: ") + std::strerror(errno));
  if (pid == 0) {
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) dup2(fd, 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  rusage ru {};
  if (wait4(pid, &status, 0, &ru) < 0) throw InternalError(std::string("bench reshard: wait: ") + std::strerror(errno));
  Child c;
  c.seconds = now() - t0;
  c.peak_rss = static_cast<uint64_t>(ru.ru_maxrss) * 1024;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    throw InternalError("bench reshard: `" + cmd + "` failed (status " + std::to_string(status) + ")");
  }
  return c;
}

}  // namespace

ReshardBenchResult run_reshard_bench(const ReshardBenchOptions& o) {
  if (o.exe.empty()) throw UsageError("bench reshard: no fpgather binary to run");
  ReshardBenchResult res;
  const std::string base = o.dir + "/fpgather-bench-reshard-" + std::to_string(getpid());
  if (mkdir(base.c_str(), 0755) != 0) throw FormatError(base + ": cannot create: " + std::strerror(errno));
  struct Cleanup {
    std::string p;
    ~Cleanup() { fpckpt::remove_tree(p); }
  } cleanup{base};

  const fpckpt::PlainIo plain = fpckpt::measure_plain_io(base, o.plain_bytes, true);
  res.plain_write_gbps = plain.write_gbps();
  res.plain_read_gbps = plain.read_gbps();
  res.duplex_gbps = plain.duplex_gbps();
  const double disk = std::min(res.plain_write_gbps, res.plain_read_gbps);
  std::vector<std::string> global = {o.exe, "--no-progress"};
  if (o.threads) global.insert(global.end(), {"--threads", std::to_string(o.threads)});
  for (const std::string& model : o.models) {
    ReshardBenchRow row;
    row.model = model;
    const std::string src = base + "/" + model + "-src", dst = base + "/" + model + "-dst";
    std::vector<std::string> train = global;
    train.insert(train.end(), {"train", "--model", model, "--steps", "1", "--dp", std::to_string(o.from_dp), "--save",
                               src, "--compress", "none"});
    row.train_s = run_child(train, base + "/train.out").seconds;
    fpckpt::evict_path(src);
    std::vector<std::string> reshard = global;
    reshard.insert(reshard.end(), {"--json", "reshard", src, dst, "--dp", std::to_string(o.to_dp), "--accumulation", "1", "--compress", "none"});
    const Child c = run_child(reshard, base + "/reshard.json");
    std::ifstream in(base + "/reshard.json");
    const auto j = nlohmann::json::parse(in);
    row.bytes_read = j.at("bytes_read").get<uint64_t>();
    row.bytes_written = j.at("bytes_written").get<uint64_t>();
    row.reshard_s = c.seconds;
    row.peak_rss = c.peak_rss;
    row.gbps = row.bytes_written / c.seconds / 1e9;
    row.ratio = disk > 0 ? row.gbps / disk : 0;
    const double serial = 1 / (1 / res.plain_read_gbps + 1 / res.plain_write_gbps);
    row.serial_ratio = serial > 0 ? row.gbps / serial : 0;
    row.duplex_ratio = res.duplex_gbps > 0 ? row.gbps / res.duplex_gbps : 0;
    res.rows.push_back(row);
    fpckpt::remove_tree(src);
    fpckpt::remove_tree(dst);
  }
  return res;
}

}  // namespace fpg::bench
