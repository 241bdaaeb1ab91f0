// An immutable string that copies share: one allocation for all the places that hold one name.
//
// A checkpoint index repeats each key's name once per chunk (a DCP storage entry names its key);
// holding it shared keeps a million-chunk index from allocating, copying and freeing a million
// strings, and lets equal names compare by pointer first.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace fpg {

class SharedString {
 public:
  SharedString() = default;  // ""; allocates nothing
  SharedString(std::string s) : p_(s.empty() ? nullptr : std::make_shared<const std::string>(std::move(s))) {}
  SharedString(const char* s) : SharedString(std::string(s)) {}

  const std::string& str() const { return p_ ? *p_ : empty(); }
  operator const std::string&() const { return str(); }
  operator std::string_view() const { return str(); }
  // Whether both hold the same allocation (then they are equal without comparing).
  bool shares(const SharedString& o) const { return p_ == o.p_; }

  friend bool operator==(const SharedString& a, const SharedString& b) { return a.shares(b) || a.str() == b.str(); }
  friend bool operator!=(const SharedString& a, const SharedString& b) { return !(a == b); }
  friend bool operator==(const SharedString& a, const std::string& b) { return a.str() == b; }
  friend bool operator!=(const SharedString& a, const std::string& b) { return a.str() != b; }
  friend bool operator==(const SharedString& a, const char* b) { return a.str() == b; }
  friend bool operator!=(const SharedString& a, const char* b) { return a.str() != b; }

 private:
  static const std::string& empty() {
    static const std::string e;
    return e;
  }
  std::shared_ptr<const std::string> p_;
};

}  // namespace fpg
