#include "model/network_reference.h"

#include <cmath>

#include "core/error.h"
#include "model/network_compute.h"  // kRmsNormEps

namespace fpg::model {
namespace {

// y[n] = Σ_k W[n, k]·v[k] for W [rows, cols].
std::vector<double> matvec(const double* w, uint64_t rows, uint64_t cols, const std::vector<double>& v) {
  std::vector<double> y(rows, 0.0);
  for (uint64_t n = 0; n < rows; ++n)
    for (uint64_t k = 0; k < cols; ++k) y[n] += w[n * cols + k] * v[k];
  return y;
}

// Rounds every element to bf16 when bf16 is set.
void round_all(std::vector<double>& v, bool bf16) {
  if (!bf16) return;
  for (double& e : v) e = double(round_to_bf16(float(e)));
}

std::vector<double> rounded(const double* p, uint64_t n, bool bf16) {
  std::vector<double> v(p, p + n);
  round_all(v, bf16);
  return v;
}

std::vector<double> rmsnorm(const std::vector<double>& h, const double* w) {
  double ss = 0.0;
  for (double v : h) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / double(h.size()) + double(kRmsNormEps));
  std::vector<double> out(h.size());
  for (size_t j = 0; j < h.size(); ++j) out[j] = h[j] * r * w[j];
  return out;
}

}  // namespace

void network_forward_reference(const NetworkDims& d, const std::vector<const double*>& params_in,
                               const double* x, int64_t batch, double* y, Compute compute) {
  if (params_in.size() != 3 + 3 * d.layers) throw UsageError("network_forward_reference: wrong param count");
  const bool bf16 = compute == Compute::bf16;
  const std::vector<Param> shapes = network_params(d);
  std::vector<std::vector<double>> owned;
  for (size_t i = 0; i < params_in.size(); ++i) owned.push_back(rounded(params_in[i], shapes[i].numel(), bf16));
  std::vector<const double*> params;
  for (const auto& p : owned) params.push_back(p.data());
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<double> xr = rounded(x + uint64_t(b) * d.input, d.input, bf16);
    std::vector<double> h = matvec(params[0], d.hidden, d.input, xr);
    for (uint64_t l = 0; l < d.layers; ++l) {
      std::vector<double> a = rmsnorm(h, params[1 + 3 * l]);
      round_all(a, bf16);
      std::vector<double> u = matvec(params[2 + 3 * l], 2 * d.ffn, d.hidden, a);
      round_all(u, bf16);
      std::vector<double> z(d.ffn);
      for (uint64_t j = 0; j < d.ffn; ++j) {
        const double g = u[j];
        z[j] = g / (1.0 + std::exp(-g)) * u[d.ffn + j];
      }
      round_all(z, bf16);
      const std::vector<double> delta = matvec(params[3 + 3 * l], d.hidden, d.ffn, z);
      for (uint64_t j = 0; j < d.hidden; ++j) h[j] += delta[j];
    }
    std::vector<double> a = rmsnorm(h, params[1 + 3 * d.layers]);
    round_all(a, bf16);
    const std::vector<double> out = matvec(params[2 + 3 * d.layers], d.output, d.hidden, a);
    for (uint64_t j = 0; j < d.output; ++j) y[uint64_t(b) * d.output + j] = out[j];
  }
}

double network_loss_reference(const NetworkDims& d, const std::vector<const double*>& params,
                              const double* x, const double* target, int64_t batch) {
  std::vector<double> y(uint64_t(batch) * d.output);
  network_forward_reference(d, params, x, batch, y.data());
  double sum = 0.0;
  for (size_t i = 0; i < y.size(); ++i) sum += (y[i] - target[i]) * (y[i] - target[i]);
  return sum / double(y.size());
}

}  // namespace fpg::model
