// The nccl communicator on every visible GPU (1, 2, … ranks, one thread each) against the threads
// backend on the same data.
//  - gathers and broadcast: bit for bit;
//  - sum: bit for bit on integer-valued inputs (exact in any order) at every rank count, and on
//    mixed-magnitude inputs (order-sensitive) up to 2 ranks, where every element is a single
//    addition; beyond 2 ranks NCCL's order differs from rank order (nccl_backend.h), so mixed inputs
//    are compared within a relative tolerance of the summed magnitudes;
//  - max with NaN, ±inf and ±0 mixed in: bit for bit except that NaN results are compared as NaN
//    (nccl clears the sign and keeps the largest payload, comm/max_key.h).
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "catch.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_backend.h"
#include "core/float_codec.h"
#include "kernels/cuda_check.h"
#include "kernels/device.h"

using fpg::DType;
using fpg::comm::Communicator;
using fpg::comm::ReduceOp;
using fpg::comm::WorkPtr;

namespace {

using Bytes = std::vector<uint8_t>;
// One collective given rank r's input buffer `in` (in place) or `in` and `out`.
using Op = std::function<WorkPtr(Communicator&, void* in, void* out)>;

uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

// 1, 2, 4 … up to the visible GPUs; under mpirun only the job's size (one GPU per process).
std::vector<int> rank_counts() {
  if (fpg::comm::launched_by_mpi()) return {fpg::comm::launcher_size()};
  std::vector<int> out;
  for (int n = 1; n <= std::min(fpg::cuda::device_count(), 8); n *= 2) out.push_back(n);
  if (fpg::cuda::device_count() == 3) out.push_back(3);
  return out;
}

// One collective on every rank: rank r's buffers start as in[r] (and `out_bytes` of 0xee); after
// it, both are compared with the threads backend's.
struct Case {
  std::vector<Bytes> in;
  size_t out_bytes = 0;
  Op op;
  DType dtype = DType::U8;  // U8: compare bytes; F32/BF16: compare as values (NaN == NaN)
  double tol = 0;           // relative to `scale`, for order-dependent sums; 0: bit for bit
  double scale = 0;
};

struct Result {
  std::vector<Bytes> in, out;  // per rank, after the collective
  std::vector<bool> hosted;    // ranks this process ran (all, except under mpirun)
};

// Every case in turn within one group run (one NCCL communicator for all of them).
std::vector<Result> run_cases(const std::string& backend, int n, const std::vector<Case>& cases) {
  std::vector<Result> res;
  for (const Case& c : cases)
    res.push_back({c.in, std::vector<Bytes>(static_cast<size_t>(n), Bytes(c.out_bytes, 0xee)),
                   std::vector<bool>(static_cast<size_t>(n), false)});
  fpg::comm::make_communicator_group(backend, n)->run([&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    const bool device = c.memory_space() == fpg::comm::MemorySpace::device;
    cudaStream_t s = device ? fpg::comm::nccl_compute_stream(c) : nullptr;
    for (size_t k = 0; k < cases.size(); ++k) {
      Result& x = res[k];
      x.hosted[r] = true;
      if (!device) {
        cases[k].op(c, x.in[r].data(), x.out[r].data())->wait();
        continue;
      }
      void *in = nullptr, *out = nullptr;
      const size_t in_bytes = x.in[r].size(), out_bytes = x.out[r].size();
      FPG_CUDA_CHECK(cudaMalloc(&in, std::max<size_t>(in_bytes, 1)));
      FPG_CUDA_CHECK(cudaMalloc(&out, std::max<size_t>(out_bytes, 1)));
      FPG_CUDA_CHECK(cudaMemcpyAsync(in, x.in[r].data(), in_bytes, cudaMemcpyHostToDevice, s));
      FPG_CUDA_CHECK(cudaMemcpyAsync(out, x.out[r].data(), out_bytes, cudaMemcpyHostToDevice, s));
      cases[k].op(c, in, out)->wait();  // orders the copies below after the collective
      FPG_CUDA_CHECK(cudaMemcpyAsync(x.in[r].data(), in, in_bytes, cudaMemcpyDeviceToHost, s));
      FPG_CUDA_CHECK(cudaMemcpyAsync(x.out[r].data(), out, out_bytes, cudaMemcpyDeviceToHost, s));
      FPG_CUDA_CHECK(cudaStreamSynchronize(s));
      FPG_CUDA_CHECK(cudaFree(in));
      FPG_CUDA_CHECK(cudaFree(out));
    }
  });
  return res;
}

void require_close(DType dt, const Bytes& got, const Bytes& want, double tol, double scale);

// Both backends on every case; each rank this process hosts is compared.
void require_same(int n, const std::vector<Case>& cases) {
  const auto want = run_cases("threads", n, cases), got = run_cases("nccl", n, cases);
  for (size_t k = 0; k < cases.size(); ++k)
    for (size_t r = 0; r < static_cast<size_t>(n); ++r) {
      if (!got[k].hosted[r]) continue;
      if (cases[k].dtype == DType::U8) {
        REQUIRE(got[k].in[r] == want[k].in[r]);
        REQUIRE(got[k].out[r] == want[k].out[r]);
      } else {
        require_close(cases[k].dtype, got[k].in[r], want[k].in[r], cases[k].tol, cases[k].scale);
        require_close(cases[k].dtype, got[k].out[r], want[k].out[r], cases[k].tol, cases[k].scale);
      }
    }
}

float as_float(DType dt, const uint8_t* p) {
  if (dt == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, p, 2);
  return fpg::float_from_bf16(b);
}

// Element-wise comparison of reductions: NaN matches NaN; `tol` > 0 allows |a-b| <= tol·scale.
void require_close(DType dt, const Bytes& got, const Bytes& want, double tol, double scale) {
  REQUIRE(got.size() == want.size());
  const size_t eb = dt == DType::F32 ? 4 : 2;
  for (size_t i = 0; i < got.size(); i += eb) {
    const float a = as_float(dt, &got[i]), b = as_float(dt, &want[i]);
    if (std::isnan(b)) {
      REQUIRE(std::isnan(a));
    } else if (tol == 0) {
      REQUIRE(std::memcmp(&got[i], &want[i], eb) == 0);
    } else {
      REQUIRE(std::fabs(static_cast<double>(a) - b) <= tol * scale);
    }
  }
}

enum class Data { integers, mixed, specials };

float value(Data d, int rank, size_t i) {
  const uint32_t m = mix(static_cast<uint64_t>(rank) << 40 | i);
  static const float mixed[] = {1e8f, 1.0f, -1e8f, 0.5f, -3.0f, 1e-3f, 7e7f, -2.5e7f, 3.25f, -0.0f};
  switch (d) {
    case Data::integers: return static_cast<float>(static_cast<int>(m % 2001) - 1000);
    case Data::mixed: return mixed[m % 10];
    case Data::specials:
      switch (m % 13) {
        case 0: return std::nanf("");
        case 1: return -INFINITY;
        case 2: return INFINITY;
        case 3: return 0.0f;
        case 4: return -0.0f;
        default: return mixed[m % 10];
      }
  }
  return 0;
}

Bytes values(DType dt, Data d, int rank, size_t count) {
  Bytes b(count * (dt == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < count; ++i) {
    const float f = value(d, rank, i);
    if (dt == DType::F32) {
      std::memcpy(&b[i * 4], &f, 4);
    } else {
      const uint16_t h = fpg::bf16_from_float(f);
      std::memcpy(&b[i * 2], &h, 2);
    }
  }
  return b;
}

const size_t kCounts[] = {0, 1, 37, 100003};

Case reduction_case(int n, DType dt, ReduceOp op, Data d, size_t count, bool scatter, bool in_place) {
  const size_t eb = dt == DType::F32 ? 4 : 2, total = scatter ? count * static_cast<size_t>(n) : count;
  Case c;
  for (int r = 0; r < n; ++r) c.in.push_back(values(dt, d, r, total));
  c.out_bytes = in_place ? 0 : count * eb;
  c.op = [=](Communicator& cm, void* in, void* out) {
    if (scatter) return in_place ? cm.reduce_scatter(in, count, dt, op) : cm.reduce_scatter(in, out, count, dt, op);
    return in_place ? cm.all_reduce(in, count, dt, op) : cm.all_reduce(in, out, count, dt, op);
  };
  c.dtype = dt;
  const bool exact = op == ReduceOp::max || d == Data::integers || n <= 2;
  c.tol = exact ? 0 : 1e-6;
  c.scale = 1e8 * n;
  return c;
}

}  // namespace

TEST_CASE("nccl all_gather and broadcast equal the threads backend bit for bit", "[gpu][comm]") {
  for (int n : rank_counts()) {
    std::vector<Case> cases;
    for (size_t per : kCounts) {
      std::vector<Bytes> in;
      for (int r = 0; r < n; ++r) {
        Bytes b(per * static_cast<size_t>(n), 0xab);
        for (size_t i = 0; i < per; ++i) b[static_cast<size_t>(r) * per + i] = static_cast<uint8_t>(mix(r * 7919u + i));
        in.push_back(b);
      }
      // out of place from this rank's slot, and in place
      cases.push_back({in, per * static_cast<size_t>(n), [=](Communicator& c, void* i, void* o) {
                         return c.all_gather(static_cast<char*>(i) + static_cast<size_t>(c.rank()) * per, o, per);
                       }});
      cases.push_back({in, 0, [=](Communicator& c, void* i, void*) { return c.all_gather(i, per); }});
      const size_t bytes = in[0].size();
      for (int root = 0; root < n; ++root)
        cases.push_back({in, 0, [=](Communicator& c, void* i, void*) { return c.broadcast(i, bytes, root); }});
    }
    require_same(n, cases);
  }
}

TEST_CASE("nccl uneven all_gather with zero sizes equals the threads backend", "[gpu][comm]") {
  for (int n : rank_counts()) {
    std::vector<Case> cases;
    for (int pattern = 0; pattern < 3; ++pattern) {
      std::vector<size_t> sizes(static_cast<size_t>(n));
      for (int q = 0; q < n; ++q)
        sizes[static_cast<size_t>(q)] = pattern == 0 ? 0 : pattern == 1 ? (q % 2 ? 0 : 4099 + q) : 1 + 3 * q;
      size_t total = 0;
      std::vector<size_t> offset;
      for (size_t s : sizes) offset.push_back(total), total += s;
      std::vector<Bytes> in;
      for (int r = 0; r < n; ++r) {
        Bytes b(total, 0xcd);
        for (size_t i = 0; i < sizes[static_cast<size_t>(r)]; ++i)
          b[offset[static_cast<size_t>(r)] + i] = static_cast<uint8_t>(mix(r * 31u + i));
        in.push_back(b);
      }
      cases.push_back({in, total, [=](Communicator& c, void* i, void* o) {
                         return c.all_gather_v(static_cast<char*>(i) + offset[static_cast<size_t>(c.rank())], o, sizes);
                       }});
      cases.push_back({in, 0, [=](Communicator& c, void* i, void*) { return c.all_gather_v(i, sizes); }});
    }
    require_same(n, cases);
  }
}

TEST_CASE("nccl reduce_scatter and all_reduce sums against the threads backend", "[gpu][comm]") {
  for (int n : rank_counts()) {
    std::vector<Case> cases;
    for (DType dt : {DType::F32, DType::BF16})
      for (Data d : {Data::integers, Data::mixed})
        for (size_t count : kCounts)
          for (bool scatter : {true, false})
            for (bool in_place : {true, false})
              cases.push_back(reduction_case(n, dt, ReduceOp::sum, d, count, scatter, in_place));
    require_same(n, cases);
  }
}

TEST_CASE("nccl max propagates NaN and orders +0 above -0 like the threads backend", "[gpu][comm]") {
  for (int n : rank_counts()) {
    std::vector<Case> cases;
    for (DType dt : {DType::F32, DType::BF16})
      for (size_t count : kCounts)
        for (bool scatter : {true, false})
          for (bool in_place : {true, false})
            cases.push_back(reduction_case(n, dt, ReduceOp::max, Data::specials, count, scatter, in_place));
    require_same(n, cases);
  }
}

TEST_CASE("nccl handles: issue many, wait out of order, read after the compute stream", "[gpu][comm]") {
  for (int n : rank_counts()) {
    std::vector<int> failures(static_cast<size_t>(n), 0);
    fpg::comm::make_communicator_group("nccl", n)->run([&](Communicator& c) {
      const int r = c.rank();
      cudaStream_t s = fpg::comm::nccl_compute_stream(c);
      const size_t count = 1 << 20;
      std::vector<float> host(count, static_cast<float>(r + 1));
      float *a = nullptr, *b = nullptr;
      FPG_CUDA_CHECK(cudaMalloc(&a, count * 4));
      FPG_CUDA_CHECK(cudaMalloc(&b, count * 4 * static_cast<size_t>(n)));
      FPG_CUDA_CHECK(cudaMemcpyAsync(a, host.data(), count * 4, cudaMemcpyHostToDevice, s));
      std::vector<WorkPtr> works;
      for (int k = 0; k < 8; ++k) works.push_back(c.all_reduce(a, count, DType::F32, ReduceOp::sum));
      works.push_back(c.all_gather(a, b, count * 4));
      for (size_t k = works.size(); k-- > 0;) works[k]->wait();
      std::vector<float> got(count * static_cast<size_t>(n));
      FPG_CUDA_CHECK(cudaMemcpyAsync(got.data(), b, got.size() * 4, cudaMemcpyDeviceToHost, s));
      FPG_CUDA_CHECK(cudaStreamSynchronize(s));
      for (auto& w : works)
        if (!w->done()) failures[static_cast<size_t>(r)]++;
      // (r+1) summed 8 times over n ranks: n(n+1)/2 · n^7, exact in fp32 for small n
      const float want = static_cast<float>(n * (n + 1) / 2) * std::pow(static_cast<float>(n), 7.0f);
      for (float x : got)
        if (x != want) {
          failures[static_cast<size_t>(r)]++;
          break;
        }
      c.barrier()->wait();
      const auto blobs = c.all_gather_bytes(std::vector<uint8_t>(static_cast<size_t>(r) * 3, static_cast<uint8_t>(r)));
      for (int q = 0; q < n; ++q)
        if (blobs[static_cast<size_t>(q)] != std::vector<uint8_t>(static_cast<size_t>(q) * 3, static_cast<uint8_t>(q)))
          failures[static_cast<size_t>(r)]++;
      const auto on_root = c.gather_bytes({static_cast<uint8_t>(r)}, n - 1);
      if (on_root.size() != (r == n - 1 ? static_cast<size_t>(n) : 0u)) failures[static_cast<size_t>(r)]++;
      FPG_CUDA_CHECK(cudaFree(a));
      FPG_CUDA_CHECK(cudaFree(b));
    });
    for (int f : failures) REQUIRE(f == 0);
  }
}

// Hidden ([.]): its first version (rank 0 throwing before any collective) hung on 2 H200s: rank 1
// blocked inside ncclAllReduce, in NCCL's lazy connection setup that needs the peer, where no
// abort flag is seen. This version fails after a first collective has connected the ranks; it has
// not run on a device yet. Run it with `fpgather_gpu_tests "[nccl-abort]"`.
TEST_CASE("an nccl rank that throws after a collective fails the run with its own error", "[.][nccl-abort]") {
  const int n = rank_counts().back();
  if (n < 2 || fpg::comm::launched_by_mpi()) return;  // under mpirun a failing process ends the job
  fpg::comm::CommOptions opts;
  opts.timeout = std::chrono::seconds(30);
  REQUIRE_THROWS_AS(fpg::comm::make_communicator_group("nccl", n, opts)->run([&](Communicator& c) {
    c.barrier()->wait();
    if (c.rank() == 0) throw fpg::UsageError("rank 0 failed on purpose");
    c.barrier()->wait();  // never completes: rank 0 is gone
  }), fpg::UsageError);
}
