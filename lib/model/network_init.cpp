#include "model/network_init.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/philox.h"

namespace fpg::model {
namespace {

// Philox key domains: one generator per network under one user seed (batch_stream.cpp uses others).
constexpr uint64_t kStudentDomain = 0x5354554445ull;  // "STUDE"
constexpr uint64_t kTeacherDomain = 0x5445414348ull;  // "TEACH"

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Standard deviation of p's entries, 0 for the norm weights (ones).
double init_std(const Param& p, const NetworkDims& d, NetworkRole role) {
  if (p.name == "input.weight") return 1.0 / std::sqrt(double(d.input));
  if (p.name == "output.weight")
    return (role == NetworkRole::student ? double(kStudentOutputGain) : 1.0) / std::sqrt(double(d.hidden));
  if (ends_with(p.name, ".fc1.weight")) return 1.0 / std::sqrt(double(d.hidden));
  if (ends_with(p.name, ".fc2.weight")) return 1.0 / std::sqrt(double(d.ffn) * double(d.layers));
  return 0.0;
}

// The param of network_params(d) that `p` names, or a UsageError.
void check_network_param(const Param& p, const NetworkDims& d) {
  for (const Param& q : network_params(d))
    if (q.name == p.name) {
      if (q.shape != p.shape)
        throw UsageError("network param '" + p.name + "' has shape " + shape_string(p.shape) +
                         ", the network needs " + shape_string(q.shape));
      return;
    }
  throw UsageError("'" + p.name + "' is not a parameter of the built-in network");
}

}  // namespace

void init_network_param(const Param& p, const NetworkDims& dims, uint64_t seed, NetworkRole role,
                        float* out) {
  check_network_param(p, dims);
  const double std_dev = init_std(p, dims, role);
  if (std_dev == 0.0) {
    std::fill(out, out + p.numel(), 1.0f);
    return;
  }
  const PhiloxKey key = philox_key(seed, role == NetworkRole::student ? kStudentDomain : kTeacherDomain);
  // Element pairs are drawn by their index (counter-based), so filling blocks of an even size on
  // several threads gives the values one thread gives. A 1b network is 2 × 1e9 draws.
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  const uint64_t n = p.numel(), stream = fnv1a64(p.name);
  const float scale = static_cast<float>(std_dev);
  ThreadPool::global().parallel_for((n + kBlock - 1) / kBlock, [&](size_t b) {
    const uint64_t lo = b * kBlock;
    philox_normal_fill(key, stream, lo, std::min(n, lo + kBlock) - lo, scale, out + lo);
  });
}

std::vector<std::vector<float>> init_network_params(const ModelSpec& spec, uint64_t seed,
                                                    NetworkRole role) {
  if (!spec.network)
    throw UsageError("model '" + spec.name + "' is not the built-in network (no network dims)");
  std::vector<std::vector<float>> values(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i) {
    values[i].resize(spec.params[i].numel());
    init_network_param(spec.params[i], *spec.network, seed, role, values[i].data());
  }
  return values;
}

}  // namespace fpg::model
