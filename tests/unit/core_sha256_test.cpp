// core/sha256.h against the FIPS 180-4 examples: the digests integrity.json records.
#include <string>

#include "catch.h"
#include "core/sha256.h"

TEST_CASE("sha256: FIPS 180-4 examples", "[core][sha256]") {
  CHECK(fpg::sha256_hex("", 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(fpg::sha256_hex("abc", 3) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  CHECK(fpg::sha256_hex(two_blocks.data(), two_blocks.size()) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST_CASE("sha256: a million 'a' in uneven updates equals the one-shot digest", "[core][sha256]") {
  const std::string a(1000000, 'a');
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(fpg::sha256_hex(a.data(), a.size()) == want);
  fpg::Sha256 h;
  size_t at = 0;
  for (size_t step = 1; at < a.size(); step = step * 3 + 1) {
    const size_t n = std::min(step, a.size() - at);
    h.update(a.data() + at, n);
    at += n;
  }
  CHECK(h.hex_digest() == want);
}
