// Byte-moving collectives of the threads communicator: all_gather, all_gather_v, broadcast, blobs.
#include <vector>

#include "catch.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm_test_util.h"

using fpg::comm::Communicator;
using fpg::comm::run_ranks;
using namespace comm_test;

namespace {

const std::vector<size_t> kSizes = {0, 1, 7, 100003};

// The expected all_gather_v result for these per-rank sizes.
std::vector<uint8_t> packed(const std::vector<size_t>& counts) {
  std::vector<uint8_t> out;
  for (size_t q = 0; q < counts.size(); ++q)
    for (size_t i = 0; i < counts[q]; ++i) out.push_back(byte_of(static_cast<int>(q), i));
  return out;
}

// Per-rank byte counts with empty ranks in every position that matters.
std::vector<std::vector<size_t>> uneven_cases(int n) {
  std::vector<std::vector<size_t>> cases;
  std::vector<size_t> c(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) c[r] = static_cast<size_t>((r * 37 + 5) % 11) * 3;  // uneven, some odd
  cases.push_back(c);
  for (int r = 0; r < n; ++r) c[r] = r == 0 ? 0 : static_cast<size_t>(r) + 2;  // rank 0 empty
  cases.push_back(c);
  for (int k = 0; k < n; ++k) {  // all but rank k empty
    for (int r = 0; r < n; ++r) c[r] = r == k ? 13 : 0;
    cases.push_back(c);
  }
  for (int r = 0; r < n; ++r) c[r] = 0;  // all empty
  cases.push_back(c);
  for (int r = 0; r < n; ++r) c[r] = r % 2 ? 0 : 40000 + static_cast<size_t>(r) * 3;  // large, alternating
  cases.push_back(c);
  return cases;
}

}  // namespace

TEST_CASE("all_gather in place gives every rank every contribution", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t len : kSizes) {
        std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n));
        run_ranks(n, [&](Communicator& c) {
          const int r = c.rank();
          std::vector<uint8_t> buf(static_cast<size_t>(n) * len, 0xEE);
          for (size_t i = 0; i < len; ++i) buf[static_cast<size_t>(r) * len + i] = byte_of(r, i);
          c.all_gather(buf.data(), len)->wait();
          got[static_cast<size_t>(r)] = buf;
        }, opts);
        const auto expected = packed(std::vector<size_t>(static_cast<size_t>(n), len));
        for (int r = 0; r < n; ++r) REQUIRE(got[static_cast<size_t>(r)] == expected);
      }
}

TEST_CASE("all_gather out of place", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t len : kSizes) {
        std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n));
        run_ranks(n, [&](Communicator& c) {
          const int r = c.rank();
          std::vector<uint8_t> send(len);
          for (size_t i = 0; i < len; ++i) send[i] = byte_of(r, i);
          std::vector<uint8_t> recv(static_cast<size_t>(n) * len, 0xEE);
          c.all_gather(send.data(), recv.data(), len)->wait();
          got[static_cast<size_t>(r)] = recv;
        }, opts);
        const auto expected = packed(std::vector<size_t>(static_cast<size_t>(n), len));
        for (int r = 0; r < n; ++r) REQUIRE(got[static_cast<size_t>(r)] == expected);
      }
}

TEST_CASE("all_gather_v with uneven sizes and empty ranks", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (const auto& counts : uneven_cases(n))
        for (bool in_place : {true, false}) {
          std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n));
          const auto expected = packed(counts);
          run_ranks(n, [&](Communicator& c) {
            const int r = c.rank();
            size_t offset = 0;
            for (int q = 0; q < r; ++q) offset += counts[static_cast<size_t>(q)];
            const size_t mine = counts[static_cast<size_t>(r)];
            std::vector<uint8_t> recv(expected.size(), 0xEE), send(mine);
            for (size_t i = 0; i < mine; ++i) send[i] = recv[offset + i] = byte_of(r, i);
            if (in_place) {
              c.all_gather_v(recv.data(), counts)->wait();
            } else {
              c.all_gather_v(send.data(), recv.data(), counts)->wait();
            }
            got[static_cast<size_t>(r)] = recv;
          }, opts);
          for (int r = 0; r < n; ++r) REQUIRE(got[static_cast<size_t>(r)] == expected);
        }
}

TEST_CASE("broadcast from every root", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t len : kSizes)
        for (int root = 0; root < n; ++root) {
          std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n));
          run_ranks(n, [&](Communicator& c) {
            const int r = c.rank();
            std::vector<uint8_t> buf(len);
            for (size_t i = 0; i < len; ++i) buf[i] = byte_of(r, i);
            c.broadcast(buf.data(), len, root)->wait();
            got[static_cast<size_t>(r)] = buf;
          }, opts);
          std::vector<uint8_t> expected(len);
          for (size_t i = 0; i < len; ++i) expected[i] = byte_of(root, i);
          for (int r = 0; r < n; ++r) REQUIRE(got[static_cast<size_t>(r)] == expected);
        }
}

TEST_CASE("barrier orders writes before it with reads after it", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks) {
      std::vector<int> flags(static_cast<size_t>(n), 0);
      std::vector<int> seen(static_cast<size_t>(n), 0);
      run_ranks(n, [&](Communicator& c) {
        flags[static_cast<size_t>(c.rank())] = 1;
        c.barrier()->wait();
        int sum = 0;
        for (int f : flags) sum += f;
        seen[static_cast<size_t>(c.rank())] = sum;
      }, opts);
      for (int s : seen) REQUIRE(s == n);
    }
}

TEST_CASE("blob gathers carry blobs of any size, empty included", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks) {
      std::vector<std::vector<std::vector<uint8_t>>> all(static_cast<size_t>(n)), to_root(static_cast<size_t>(n));
      const int root = n - 1;
      run_ranks(n, [&](Communicator& c) {
        const int r = c.rank();
        std::vector<uint8_t> blob(static_cast<size_t>(r) * 3);  // rank 0's is empty
        for (size_t i = 0; i < blob.size(); ++i) blob[i] = byte_of(r, i);
        all[static_cast<size_t>(r)] = c.all_gather_bytes(blob);
        to_root[static_cast<size_t>(r)] = c.gather_bytes(blob, root);
      }, opts);
      std::vector<std::vector<uint8_t>> expected(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q)
        for (size_t i = 0; i < static_cast<size_t>(q) * 3; ++i) expected[static_cast<size_t>(q)].push_back(byte_of(q, i));
      for (int r = 0; r < n; ++r) {
        REQUIRE(all[static_cast<size_t>(r)] == expected);
        if (r == root) {
          REQUIRE(to_root[static_cast<size_t>(r)] == expected);
        } else {
          REQUIRE(to_root[static_cast<size_t>(r)].empty());
        }
      }
    }
}
