#include "json_output.h"

#include <cstdio>

namespace fpg::cli {

void print_json(const nlohmann::json& j) {
  const std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace fpg::cli
