// Runs under `mpirun -n N`: every collective of the mpi communicator on this process's rank, against
// the threads backend run in this same process on the same data (all N ranks as threads), compared
// bit for bit — the mpi backend promises the threads backend's results exactly. Also checks that
// mismatched calls are a UsageError on every rank. Exit 0: all equal; 1: a difference (printed);
// 77: this build has no MPI or the program was not started by mpirun.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/comm_error.h"
#include "comm/communicator.h"
#include "comm/group.h"
#include "comm/mpi_runtime.h"
#include "core/error.h"
#include "core/float_codec.h"
#include "unit/comm_test_util.h"

using fpg::DType;
using fpg::comm::Communicator;
using fpg::comm::ReduceOp;
using namespace comm_test;

namespace {

using Bytes = std::vector<uint8_t>;
// A scenario appends everything its rank observed to `out`.
using Scenario = std::function<void(Communicator&, Bytes& out)>;

template <class T>
void append(Bytes& out, const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

// F32 inputs of mixed magnitudes (order-sensitive sums) with NaNs, infinities and both zeros mixed in.
float value(int rank, size_t i, uint64_t salt) {
  const uint32_t m = mix((static_cast<uint64_t>(rank) << 40) ^ (salt << 24) ^ i);
  switch (m % 23) {
    case 0: return std::nanf("");
    case 1: return fpg::bits_float(0xffc00001u ^ (m & 0xffu));  // negative NaN with a payload
    case 2: return 0.0f;
    case 3: return -0.0f;
    case 4: return rank % 2 ? INFINITY : -INFINITY;
    default: return mixed_value(rank, i, salt);
  }
}

std::vector<float> f32_input(int rank, size_t n, uint64_t salt, bool specials) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = specials ? value(rank, i, salt) : mixed_value(rank, i, salt);
  return v;
}

std::vector<uint16_t> bf16_input(int rank, size_t n, uint64_t salt, bool specials) {
  const auto f = f32_input(rank, n, salt, specials);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = fpg::bf16_from_float(f[i]);
  return v;
}

const size_t kCounts[] = {0, 1, 37, 10007};

void gathers(Communicator& c, Bytes& out) {
  const int r = c.rank(), n = c.size();
  for (size_t per : kCounts) {
    Bytes send(per), recv(per * static_cast<size_t>(n), 0xee), inplace(per * static_cast<size_t>(n), 0xee);
    for (size_t i = 0; i < per; ++i) send[i] = inplace[static_cast<size_t>(r) * per + i] = byte_of(r, i);
    c.all_gather(send.data(), recv.data(), per)->wait();
    c.all_gather(inplace.data(), per)->wait();
    append(out, recv);
    append(out, inplace);
  }
  std::vector<size_t> sizes(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) sizes[static_cast<size_t>(q)] = q % 2 ? 0 : 1000 + 17 * static_cast<size_t>(q);
  size_t total = 0, off = 0;
  for (int q = 0; q < n; ++q) {
    if (q == r) off = total;
    total += sizes[static_cast<size_t>(q)];
  }
  Bytes send(sizes[static_cast<size_t>(r)]), recv(total, 0xee), inplace(total, 0xee);
  for (size_t i = 0; i < send.size(); ++i) send[i] = inplace[off + i] = byte_of(r, i + 5);
  c.all_gather_v(send.data(), recv.data(), sizes)->wait();
  c.all_gather_v(inplace.data(), sizes)->wait();
  append(out, recv);
  append(out, inplace);
  for (int root = 0; root < n; ++root) {
    Bytes b(777);
    for (size_t i = 0; i < b.size(); ++i) b[i] = byte_of(r + 100 * root, i);
    c.broadcast(b.data(), b.size(), root)->wait();
    append(out, b);
  }
  c.barrier()->wait();
}

template <class T>
void reductions_of(Communicator& c, Bytes& out, DType dt,
                   std::vector<T> (*input)(int, size_t, uint64_t, bool)) {
  const int r = c.rank();
  const size_t n = static_cast<size_t>(c.size());
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
    for (size_t count : kCounts) {
      const bool specials = op == ReduceOp::max;
      // reduce_scatter, out of place and in place
      std::vector<T> send = input(r, n * count, count, specials), shard(count);
      c.reduce_scatter(send.data(), shard.data(), count, dt, op)->wait();
      append(out, shard);
      c.reduce_scatter(send.data(), count, dt, op)->wait();
      append(out, send);
      // all_reduce, out of place and in place
      std::vector<T> a = input(r, count, count + 1, specials), b(count);
      c.all_reduce(a.data(), b.data(), count, dt, op)->wait();
      c.all_reduce(a.data(), count, dt, op)->wait();
      append(out, b);
      append(out, a);
    }
}

void reductions(Communicator& c, Bytes& out) {
  reductions_of<float>(c, out, DType::F32, f32_input);
  reductions_of<uint16_t>(c, out, DType::BF16, bf16_input);
}

void blobs(Communicator& c, Bytes& out) {
  const int r = c.rank();
  Bytes blob(static_cast<size_t>(r % 3) * 11);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = byte_of(r, i + 9);
  for (const auto& b : c.all_gather_bytes(blob)) {
    out.push_back(static_cast<uint8_t>(b.size()));
    out.insert(out.end(), b.begin(), b.end());
  }
  for (int root = 0; root < c.size(); ++root) {
    const auto got = c.gather_bytes(blob, root);
    out.push_back(static_cast<uint8_t>(got.size()));
    for (const auto& b : got) out.insert(out.end(), b.begin(), b.end());
  }
}

// Every rank must see the mismatch as a UsageError with the same message. (The threads backend breaks
// its communicator after a failed collective, so nothing follows.)
void mismatch(Communicator& c, Bytes& out) {
  std::vector<float> v(8, 1.0f);
  std::string what = "no error";
  try {
    if (c.rank() == c.size() - 1) c.broadcast(v.data(), 32, 0)->wait();
    else c.all_reduce(v.data(), v.size(), DType::F32, ReduceOp::sum)->wait();
  } catch (const fpg::UsageError& e) {
    what = e.what();
  }
  out.insert(out.end(), what.begin(), what.end());
}

}  // namespace

// `--built`: exit 0 when this build has MPI, 77 otherwise (the CLI test's skip probe).
int main(int argc, char** argv) {
#if !defined(FPGATHER_HAVE_MPI)
  (void)argc, (void)argv;
  std::puts("comm_mpi_check: built without MPI (skipped)");
  return 77;
#else
  if (argc > 1 && std::strcmp(argv[1], "--built") == 0) return 0;
  if (!fpg::comm::launched_by_mpi()) {
    std::puts("comm_mpi_check: not started by mpirun (skipped)");
    return 77;
  }
  try {
    const int n = fpg::comm::launcher_size();
    const std::pair<const char*, Scenario> scenarios[] = {
        {"gathers", gathers}, {"reductions", reductions}, {"blobs", blobs}, {"mismatch", mismatch}};
    int failures = 0, rank = -1;
    for (const auto& scenario : scenarios) {
      const char* name = scenario.first;
      const Scenario& fn = scenario.second;  // a structured binding cannot be captured in C++17
      std::vector<Bytes> want(static_cast<size_t>(n));
      try {
        fpg::comm::run_ranks(n, [&](Communicator& c) { fn(c, want[static_cast<size_t>(c.rank())]); });
      } catch (const fpg::comm::CommAborted&) {
        // mismatch: each rank has recorded its UsageError; the broken threads group then aborts
        if (std::strcmp(name, "mismatch") != 0) throw;
      }
      Bytes got;
      fpg::comm::make_communicator_group("mpi", n)->run([&](Communicator& c) {
        rank = c.rank();
        fn(c, got);
      });
      const Bytes& w = want[static_cast<size_t>(rank)];
      if (got != w) {
        size_t at = 0;
        while (at < got.size() && at < w.size() && got[at] == w[at]) ++at;
        std::printf("rank %d: %s differs from the threads backend at byte %zu (%zu vs %zu bytes)\n", rank, name,
                    at, got.size(), w.size());
        ++failures;
      } else {
        std::printf("rank %d: %s equal (%zu bytes)\n", rank, name, got.size());
      }
    }
    if (rank == 0) std::printf("comm_mpi_check: %d ranks, %s\n", n, failures ? "DIFFERENCES" : "all equal");
    return failures ? 1 : 0;
  } catch (const fpg::Error& e) {
    std::fprintf(stderr, "comm_mpi_check: %s\n", e.what());
    return static_cast<int>(e.code());
  }
#endif
}
