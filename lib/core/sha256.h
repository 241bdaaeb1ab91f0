// SHA-256 (FIPS 180-4) of a byte stream, through OpenSSL's libcrypto (which uses the CPU's SHA
// instructions where it has them): what Megatron-Core's integrity.json records of every file.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace fpg {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  // The digest of everything passed to update, as 64 lowercase hex digits; the hash is then spent.
  std::string hex_digest();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// The SHA-256 of `size` bytes, as 64 lowercase hex digits.
std::string sha256_hex(const void* data, size_t size);

}  // namespace fpg
