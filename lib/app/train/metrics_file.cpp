#include "app/train/metrics_file.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace fpg::app::train {

MetricsFile::MetricsFile(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "w");
  if (!f_) throw FormatError(path_ + ": cannot create the metrics file: " + std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (f_) std::fclose(f_);
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
