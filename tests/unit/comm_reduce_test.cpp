// Reductions of the threads communicator: bitwise equal to the serial rank-order sum, max's NaN rule.
#include <cmath>
#include <cstring>
#include <vector>

#include "catch.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/host_reduce.h"
#include "comm_test_util.h"

using fpg::DType;
using fpg::comm::Communicator;
using fpg::comm::ReduceOp;
using fpg::comm::run_ranks;
using namespace comm_test;

namespace {

const std::vector<size_t> kCounts = {0, 1, 37, 100003};

// ((x0 + x1) + x2) + … in fp32, written out serially: the order the communicator documents.
std::vector<float> serial_sum(int n, size_t count, size_t first, uint64_t salt = 0) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = mixed_value(0, first + i, salt);
    for (int q = 1; q < n; ++q) acc += mixed_value(q, first + i, salt);
    out[i] = acc;
  }
  return out;
}

std::vector<float> reverse_sum(int n, size_t count, size_t first) {
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = mixed_value(n - 1, first + i);
    for (int q = n - 2; q >= 0; --q) acc += mixed_value(q, first + i);
    out[i] = acc;
  }
  return out;
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = fpg::bf16_from_float(v[i]);
  return out;
}

// A bf16 input value: mixed magnitudes again, exactly representable in bf16.
uint16_t bf16_value(int rank, size_t i) { return fpg::bf16_from_float(mixed_value(rank, i, 7)); }

// The bf16 rule: decode, sum in fp32 in rank order, round once.
std::vector<uint16_t> serial_sum_bf16(int n, size_t count, size_t first) {
  std::vector<uint16_t> out(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = fpg::float_from_bf16(bf16_value(0, first + i));
    for (int q = 1; q < n; ++q) acc += fpg::float_from_bf16(bf16_value(q, first + i));
    out[i] = fpg::bf16_from_float(acc);
  }
  return out;
}

}  // namespace

TEST_CASE("the test values make the summation order matter", "[comm]") {
  for (int n : {3, 4, 8}) {
    const auto a = serial_sum(n, 1000, 0), b = reverse_sum(n, 1000, 0);
    REQUIRE_FALSE(same_bits(a.data(), b.data(), a.size() * sizeof(float)));
  }
}

TEST_CASE("reduce_scatter sum fp32 equals the serial rank-order sum bit for bit", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t count : kCounts)
        for (bool in_place : {true, false}) {
          std::vector<std::vector<float>> got(static_cast<size_t>(n));
          run_ranks(n, [&](Communicator& c) {
            const int r = c.rank();
            std::vector<float> buf(static_cast<size_t>(n) * count);
            for (size_t i = 0; i < buf.size(); ++i) buf[i] = mixed_value(r, i);
            const std::vector<float> before = buf;
            if (in_place) {
              c.reduce_scatter(buf.data(), count, DType::F32)->wait();
              got[static_cast<size_t>(r)].assign(buf.begin() + static_cast<long>(r * count),
                                                 buf.begin() + static_cast<long>((r + 1) * count));
              // the rest of the buffer is left as it was
              for (size_t i = 0; i < buf.size(); ++i)
                if (i / count != static_cast<size_t>(r) && buf[i] != before[i]) got[static_cast<size_t>(r)].clear();
            } else {
              std::vector<float> out(count, 12345.0f);
              c.reduce_scatter(buf.data(), out.data(), count, DType::F32)->wait();
              if (buf != before) out.clear();  // the input is not touched
              got[static_cast<size_t>(r)] = out;
            }
          }, opts);
          for (int r = 0; r < n; ++r) {
            const auto expected = serial_sum(n, count, static_cast<size_t>(r) * count);
            REQUIRE(got[static_cast<size_t>(r)].size() == count);
            REQUIRE(same_bits(got[static_cast<size_t>(r)].data(), expected.data(), count * sizeof(float)));
          }
        }
}

TEST_CASE("all_reduce sum fp32 is the serial rank-order sum on every rank", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t count : kCounts)
        for (bool in_place : {true, false}) {
          std::vector<std::vector<float>> got(static_cast<size_t>(n));
          run_ranks(n, [&](Communicator& c) {
            const int r = c.rank();
            std::vector<float> buf(count);
            for (size_t i = 0; i < count; ++i) buf[i] = mixed_value(r, i);
            if (in_place) {
              c.all_reduce(buf.data(), count, DType::F32, ReduceOp::sum)->wait();
              got[static_cast<size_t>(r)] = buf;
            } else {
              std::vector<float> out(count, 12345.0f);
              c.all_reduce(buf.data(), out.data(), count, DType::F32, ReduceOp::sum)->wait();
              got[static_cast<size_t>(r)] = out;
            }
          }, opts);
          const auto expected = serial_sum(n, count, 0);
          for (int r = 0; r < n; ++r) {
            REQUIRE(got[static_cast<size_t>(r)].size() == count);
            REQUIRE(same_bits(got[static_cast<size_t>(r)].data(), expected.data(), count * sizeof(float)));
          }
        }
}

TEST_CASE("bf16 sums accumulate in fp32 in rank order and round once", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t count : kCounts) {
        std::vector<std::vector<uint16_t>> all(static_cast<size_t>(n)), scattered(static_cast<size_t>(n));
        run_ranks(n, [&](Communicator& c) {
          const int r = c.rank();
          std::vector<uint16_t> a(count), s(static_cast<size_t>(n) * count);
          for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_value(r, i);
          for (size_t i = 0; i < s.size(); ++i) s[i] = bf16_value(r, i);
          auto w1 = c.all_reduce(a.data(), count, DType::BF16, ReduceOp::sum);
          auto w2 = c.reduce_scatter(s.data(), count, DType::BF16);
          w2->wait();
          w1->wait();
          all[static_cast<size_t>(r)] = a;
          scattered[static_cast<size_t>(r)].assign(s.begin() + static_cast<long>(r * count),
                                                   s.begin() + static_cast<long>((r + 1) * count));
        }, opts);
        const auto expected = serial_sum_bf16(n, count, 0);
        for (int r = 0; r < n; ++r) {
          REQUIRE(all[static_cast<size_t>(r)] == expected);
          REQUIRE(scattered[static_cast<size_t>(r)] == serial_sum_bf16(n, count, static_cast<size_t>(r) * count));
        }
        // rounding once differs from rounding every partial sum somewhere (else the test proves little)
        if (n >= 3 && count == 100003) {
          bool differs = false;
          for (size_t i = 0; i < count && !differs; ++i) {
            uint16_t acc = bf16_value(0, i);
            for (int q = 1; q < n; ++q)
              acc = fpg::bf16_from_float(fpg::float_from_bf16(acc) + fpg::float_from_bf16(bf16_value(q, i)));
            differs = acc != expected[i];
          }
          REQUIRE(differs);
        }
      }
}

namespace {

const uint32_t kNanA = 0x7FC00123u, kNanB = 0xFFC00456u, kPosZero = 0x00000000u, kNegZero = 0x80000000u;

// The documented max rule, stated directly rather than as a running fold: any NaN gives the lowest
// rank's NaN bits; otherwise the largest value, +0 counting as larger than -0.
uint32_t max_rule(const std::vector<uint32_t>& xs) {
  for (uint32_t x : xs)
    if (std::isnan(fpg::bits_float(x))) return x;
  uint32_t best = xs[0];
  for (uint32_t x : xs) {
    const float b = fpg::bits_float(best), v = fpg::bits_float(x);
    if (v > b || (v == 0 && b == 0 && !std::signbit(v))) best = x;
  }
  return best;
}

uint32_t max_input(int rank, size_t i) {
  static const uint32_t table[] = {kNanA, kNanB, kPosZero, kNegZero, 0x7F800000u /*inf*/, 0xFF800000u /*-inf*/,
                                   0x3F800000u /*1*/, 0xBF800000u /*-1*/, 0x4B189680u /*1e7*/, 0x00000001u};
  // NaNs rarely, so most elements exercise the ordering of numbers
  const uint32_t h = mix(static_cast<uint64_t>(rank) << 32 | i);
  if (h % 16 == 0) return table[h / 16 % 2];
  return table[2 + h / 16 % 8];
}

}  // namespace

TEST_CASE("all_reduce max: NaN propagates with the lowest rank's bits, +0 beats -0", "[comm]") {
  for (const auto& opts : modes())
    for (int n : kRanks)
      for (size_t count : {size_t{0}, size_t{1}, size_t{37}, size_t{20011}}) {
        std::vector<std::vector<uint32_t>> got(static_cast<size_t>(n)), got_bf16(static_cast<size_t>(n));
        run_ranks(n, [&](Communicator& c) {
          const int r = c.rank();
          std::vector<uint32_t> v(count);
          std::vector<uint16_t> h(count);
          for (size_t i = 0; i < count; ++i) {
            v[i] = max_input(r, i);
            h[i] = static_cast<uint16_t>(v[i] >> 16);  // the same values (and NaN payloads) in bf16
          }
          c.all_reduce(v.data(), count, DType::F32, ReduceOp::max)->wait();
          c.all_reduce(h.data(), count, DType::BF16, ReduceOp::max)->wait();
          got[static_cast<size_t>(r)] = v;
          got_bf16[static_cast<size_t>(r)].assign(h.begin(), h.end());
        }, opts);
        for (size_t i = 0; i < count; ++i) {
          std::vector<uint32_t> xs, hs;
          for (int q = 0; q < n; ++q) {
            xs.push_back(max_input(q, i));
            hs.push_back(max_input(q, i) & 0xFFFF0000u);
          }
          const uint32_t want = max_rule(xs), want_bf16 = max_rule(hs) >> 16;
          for (int r = 0; r < n; ++r) {
            REQUIRE(got[static_cast<size_t>(r)][i] == want);
            REQUIRE(got_bf16[static_cast<size_t>(r)][i] == want_bf16);
          }
        }
      }
}

TEST_CASE("max worked examples", "[comm]") {
  const auto run = [](std::vector<uint32_t> xs) {
    const int n = static_cast<int>(xs.size());
    std::vector<uint32_t> got(xs.size());
    run_ranks(n, [&](Communicator& c) {
      uint32_t v = xs[static_cast<size_t>(c.rank())];
      c.all_reduce(&v, 1, DType::F32, ReduceOp::max)->wait();
      got[static_cast<size_t>(c.rank())] = v;
    });
    for (uint32_t g : got) REQUIRE(g == got[0]);
    return got[0];
  };
  const uint32_t one = 0x3F800000u, two = 0x40000000u;
  CHECK(run({one, kNanA, two}) == kNanA);         // NaN anywhere wins, even below larger numbers
  CHECK(run({kNanB, kNanA}) == kNanB);            // the lowest rank's NaN, sign and payload kept
  CHECK(run({kNegZero, kPosZero}) == kPosZero);   // +0 > -0 whatever the order
  CHECK(run({kPosZero, kNegZero}) == kPosZero);
  CHECK(run({kNegZero, kNegZero}) == kNegZero);
  CHECK(run({kNegZero}) == kNegZero);             // one rank: its input unchanged
  CHECK(run({0xFF800000u, one}) == one);
}

TEST_CASE("a sum of one rank returns its input bit for bit", "[comm]") {
  std::vector<float> v = {-0.0f, 1.5f, -1e8f};
  std::vector<float> w = v;
  run_ranks(1, [&](Communicator& c) { c.all_reduce(w.data(), w.size(), DType::F32, ReduceOp::sum)->wait(); });
  REQUIRE(same_bits(v.data(), w.data(), v.size() * sizeof(float)));
  REQUIRE(std::signbit(w[0]));
}

TEST_CASE("reduce_rank_order does not depend on how the range is split", "[comm]") {
  const int n = 5;
  const size_t count = 10007;
  std::vector<std::vector<float>> in(n, std::vector<float>(count));
  std::vector<const void*> src(n);
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < count; ++i) in[q][i] = mixed_value(q, i, 3);
    src[q] = in[q].data();
  }
  std::vector<float> whole(count), pieces(count);
  void* d1 = whole.data();
  void* d2 = pieces.data();
  fpg::comm::reduce_rank_order(DType::F32, ReduceOp::sum, src.data(), n, 0, count, &d1, 1);
  for (size_t b = 0; b < count; b += 333)
    fpg::comm::reduce_rank_order(DType::F32, ReduceOp::sum, src.data(), n, b, std::min(count, b + 333), &d2, 1);
  const auto expected = serial_sum(n, count, 0, 3);
  REQUIRE(same_bits(whole.data(), expected.data(), count * sizeof(float)));
  REQUIRE(same_bits(pieces.data(), expected.data(), count * sizeof(float)));
}
