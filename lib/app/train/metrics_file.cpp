#include "app/train/metrics_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fs.h"

namespace fpg::app::train {

void MetricsFile::check(const std::string& path, MetricsMode mode) {
  if (mode == MetricsMode::create && fs::exists(path, true))
    throw UsageError(Message(path, ": the metrics file exists: give ", Field{"force"},
                             " to replace it (a resumed run appends to it)"));
}

MetricsFile::MetricsFile(std::string path, MetricsMode mode) : path_(std::move(path)) {
  check(path_, mode);
  if (mode == MetricsMode::resume) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd >= 0) f_ = ::fdopen(fd, "r+");
    if (fd >= 0 && !f_) ::close(fd);
  } else {
    f_ = std::fopen(path_.c_str(), "w");
  }
  if (!f_) throw FormatError(path_ + ": cannot open the metrics file: " + std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (f_) std::fclose(f_);
}

void MetricsFile::start_at(uint64_t step) {
  std::rewind(f_);
  long keep = 0;  // bytes of whole lines of earlier steps
  std::string line;
  for (int c; (c = std::fgetc(f_)) != EOF;) {
    if (c != '\n') {
      line.push_back(static_cast<char>(c));
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_unsigned() || j["step"].get<uint64_t>() >= step)
      break;
    keep += static_cast<long>(line.size()) + 1;
    line.clear();
  }
  if (::ftruncate(fileno(f_), keep) != 0 || std::fseek(f_, keep, SEEK_SET) != 0)
    throw FormatError(path_ + ": cannot continue the metrics file at step " + std::to_string(step) + ": " +
                      std::strerror(errno));
}

void MetricsFile::write(const StepMetrics& m) {
  const std::string line = step_json(m) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    throw FormatError(path_ + ": writing step " + std::to_string(m.step) + " failed: " + std::strerror(errno));
}

void MetricsFile::close() {
  if (!f_) return;
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) throw FormatError(path_ + ": closing the metrics file failed: " + std::strerror(errno));
}

}  // namespace fpg::app::train
