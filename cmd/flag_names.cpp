// Library messages name options by field; the command line reports them by flag (cli.h).
#include <cctype>

#include "cli.h"
#include "core/error.h"

namespace fpg::cli {
namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

// `text` with every whole-word `field` replaced by `flag`.
std::string replace_word(std::string text, const std::string& field, const std::string& flag) {
  for (size_t at = text.find(field); at != std::string::npos; at = text.find(field, at)) {
    const size_t end = at + field.size();
    if ((at > 0 && word_char(text[at - 1])) || (end < text.size() && word_char(text[end]))) {
      at = end;
      continue;
    }
    text.replace(at, field.size(), flag);
    at += flag.size();
  }
  return text;
}

std::string flag_of(const std::string& field, const FlagNames& flags) {
  for (const auto& [f, flag] : flags)
    if (f == field) return flag;
  std::string flag = "--" + field;
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

}  // namespace

std::string flag_message(const Error& e, const FlagNames& flags) {
  std::string message = e.what();
  const auto& fields = e.fields();
  for (auto it = fields.rbegin(); it != fields.rend(); ++it)  // from the end: earlier offsets stay valid
    if (message.compare(it->at, it->field.size(), it->field) == 0)
      message.replace(it->at, it->field.size(), flag_of(it->field, flags));
  return message;
}

int with_flag_names(const FlagNames& flags, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::string message = flag_message(e, flags);
    for (const auto& [field, flag] : flags) message = replace_word(message, field, flag);
    throw UsageError(message);
  }
}

}  // namespace fpg::cli
