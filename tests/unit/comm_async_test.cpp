// Handles, completion modes and long sequences of collectives on the threads communicator.
#include <atomic>
#include <vector>

#include "catch.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm_test_util.h"

using fpg::DType;
using fpg::comm::Communicator;
using fpg::comm::ReduceOp;
using fpg::comm::run_ranks;
using fpg::comm::WorkPtr;
using namespace comm_test;

TEST_CASE("handles may be waited out of order, differently on each rank", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks) {
      std::atomic<int> failures{0};
      const bool deferred = opts.completion == Completion::deferred;
      run_ranks(n, [&](Communicator& c) {
        const int r = c.rank();
        std::vector<float> sum(5, static_cast<float>(r + 1));
        std::vector<uint8_t> gathered(static_cast<size_t>(n) * 3, 0);
        for (size_t i = 0; i < 3; ++i) gathered[static_cast<size_t>(r) * 3 + i] = byte_of(r, i);
        std::vector<uint8_t> bcast(4, static_cast<uint8_t>(r));
        WorkPtr a = c.all_reduce(sum.data(), sum.size(), DType::F32, ReduceOp::sum);
        WorkPtr b = c.all_gather(gathered.data(), 3);
        WorkPtr d = c.broadcast(bcast.data(), bcast.size(), n - 1);
        // deferred: nothing has run yet, so no output may be read before its wait
        if (deferred && (a->done() || b->done() || d->done() || sum[0] != static_cast<float>(r + 1))) failures++;
        if (!deferred && !(a->done() && b->done() && d->done())) failures++;
        if (r % 2 == 0) {
          d->wait();  // completes a and b too: they were issued first
          if (!a->done() || !b->done()) failures++;
          a->wait();
          b->wait();
        } else {
          b->wait();
          if (!a->done()) failures++;
          d->wait();
          a->wait();
        }
        if (sum[0] != static_cast<float>(n * (n + 1) / 2)) failures++;
        for (int q = 0; q < n; ++q)
          for (size_t i = 0; i < 3; ++i)
            if (gathered[static_cast<size_t>(q) * 3 + i] != byte_of(q, i)) failures++;
        for (uint8_t x : bcast)
          if (x != n - 1) failures++;
      }, opts);
      REQUIRE(failures == 0);
    }
}

TEST_CASE("deferred collectives never waited still run when the rank returns", "[comm]") {
  CommOptions opts = modes()[1];
  const int n = 4;
  std::vector<std::vector<float>> bufs(n, std::vector<float>(10));
  run_ranks(n, [&](Communicator& c) {
    auto& buf = bufs[static_cast<size_t>(c.rank())];
    for (auto& x : buf) x = 1.0f;
    (void)c.all_reduce(buf.data(), buf.size(), DType::F32, ReduceOp::sum);  // handle dropped
  }, opts);
  for (const auto& b : bufs)
    for (float x : b) REQUIRE(x == static_cast<float>(n));
}

TEST_CASE("many collectives back to back keep their generations apart", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks) {
      std::atomic<int> failures{0};
      run_ranks(n, [&](Communicator& c) {
        const int r = c.rank();
        for (int it = 0; it < 300; ++it) {
          const size_t len = static_cast<size_t>(it % 7) * 5 + static_cast<size_t>(it % 3);  // sizes vary, zero included
          std::vector<float> red(len);
          for (size_t i = 0; i < len; ++i) red[i] = static_cast<float>(it + r) + static_cast<float>(i);
          std::vector<uint8_t> gat(static_cast<size_t>(n) * len);
          for (size_t i = 0; i < len; ++i) gat[static_cast<size_t>(r) * len + i] = static_cast<uint8_t>(it + r + i);
          std::vector<float> rs(static_cast<size_t>(n) * len, static_cast<float>(it));
          std::vector<WorkPtr> works;
          works.push_back(c.all_reduce(red.data(), len, DType::F32, ReduceOp::sum));
          works.push_back(c.all_gather(gat.data(), len));
          works.push_back(c.reduce_scatter(rs.data(), len, DType::F32));
          if (it % 5 == 0) works.push_back(c.barrier());
          fpg::comm::wait_all(works);
          float rank_sum = 0;
          for (int q = 0; q < n; ++q) rank_sum += static_cast<float>(it + q);
          for (size_t i = 0; i < len; ++i) {
            if (red[i] != rank_sum + static_cast<float>(n) * static_cast<float>(i)) failures++;
            for (int q = 0; q < n; ++q)
              if (gat[static_cast<size_t>(q) * len + i] != static_cast<uint8_t>(it + q + i)) failures++;
            if (rs[static_cast<size_t>(r) * len + i] != static_cast<float>(n * it)) failures++;
          }
          if (it % 50 == 0) {
            const auto blobs = c.all_gather_bytes(std::vector<uint8_t>(static_cast<size_t>(r), static_cast<uint8_t>(it)));
            for (int q = 0; q < n; ++q)
              if (blobs[static_cast<size_t>(q)] != std::vector<uint8_t>(static_cast<size_t>(q), static_cast<uint8_t>(it)))
                failures++;
          }
        }
      }, opts);
      REQUIRE(failures == 0);
    }
}

TEST_CASE("the threads communicator reports its identity", "[comm]") {
  std::vector<int> ranks(3, -1);
  run_ranks(3, [&](Communicator& c) {
    ranks[static_cast<size_t>(c.rank())] = c.size() == 3 && c.backend() == "threads" &&
                                                   c.memory_space() == fpg::comm::MemorySpace::host
                                               ? c.rank()
                                               : -2;
  });
  REQUIRE(ranks == std::vector<int>{0, 1, 2});
}
