#include "model/network_compute.h"

#include "core/blas.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace fpg::model {
namespace {

// Row-major GEMMs, named by which operand is transposed: C[M,N] = op(A)·op(B) + beta·C.
// A linear layer's forward is nt (x·Wᵀ), its weight gradient tn (dyᵀ·x), its input gradient nn (dy·W).
void gemm_nt(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float beta, float* c) {
  blas::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(m), int(n), int(k), 1.0f, a, int(k), b, int(k),
              beta, c, int(n));
}
void gemm_tn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  blas::sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a, int(m), b, int(n),
              0.0f, c, int(n));
}
void gemm_nn(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  blas::sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a, int(k), b, int(n),
              0.0f, c, int(n));
}

float sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// Compute::bf16's rounding points (network_compute.h); in fp32 the values pass untouched.
void round_in_place(bool bf16, float* v, int64_t n) {
  if (!bf16) return;
  for (int64_t i = 0; i < n; ++i) v[i] = round_to_bf16(v[i]);
}

// in, or its rounded copy in `out` under bf16.
const float* rounded(bool bf16, const float* in, int64_t n, float* out) {
  if (!bf16) return in;
  for (int64_t i = 0; i < n; ++i) out[i] = round_to_bf16(in[i]);
  return out;
}

bool bf16_exact(const float* v, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    const float r = round_to_bf16(v[i]);
    if (!(r == v[i]) && !(r != r && v[i] != v[i])) return false;  // NaN: any payload is "exact"
  }
  return true;
}

// Param indices in network_params order.
size_t fc1_index(uint64_t l) { return 2 + 3 * l; }
size_t fc2_index(uint64_t l) { return 3 + 3 * l; }
size_t norm_index(uint64_t l) { return 1 + 3 * l; }  // l == layers: the final norm

// One rmsnorm over [rows, width]: normed = h·r, scaled = normed ⊙ w, r = 1/sqrt(mean(h²) + eps).
void rmsnorm_forward(const float* h, const float* w, int64_t rows, int64_t width, float* inv_rms,
                     float* normed, float* scaled) {
  for (int64_t b = 0; b < rows; ++b) {
    const float* hr = h + b * width;
    double ss = 0.0;
    for (int64_t j = 0; j < width; ++j) ss += double(hr[j]) * hr[j];
    const float r = 1.0f / std::sqrt(float(ss / double(width)) + kRmsNormEps);
    inv_rms[b] = r;
    float* nr = normed + b * width;
    float* sr = scaled + b * width;
    for (int64_t j = 0; j < width; ++j) {
      nr[j] = hr[j] * r;
      sr[j] = nr[j] * w[j];
    }
  }
}

// Backward of rmsnorm_forward given d(scaled): adds ∂/∂h to dh and Σ_rows d(scaled)·normed to dw.
// ∂n_j/∂h_k = r(δ_jk − n_j n_k / width), so dh = r·(dn − n·mean(dn ⊙ n)) with dn = d(scaled) ⊙ w.
void rmsnorm_backward(const float* dscaled, const float* w, const float* normed, const float* inv_rms,
                      int64_t rows, int64_t width, float* dh, double* dw) {
  std::fill(dw, dw + width, 0.0);
  for (int64_t b = 0; b < rows; ++b) {
    const float* ds = dscaled + b * width;
    const float* nr = normed + b * width;
    double dot = 0.0;
    for (int64_t j = 0; j < width; ++j) {
      dw[j] += double(ds[j]) * nr[j];
      dot += double(ds[j] * w[j]) * nr[j];
    }
    const float mean = float(dot / double(width));
    const float r = inv_rms[b];
    float* dr = dh + b * width;
    for (int64_t j = 0; j < width; ++j) dr[j] += r * (ds[j] * w[j] - nr[j] * mean);
  }
}

}  // namespace

NetworkCompute::NetworkCompute(const NetworkDims& dims, Compute compute) : dims_(dims), compute_(compute) {
  if (dims.input == 0 || dims.hidden == 0 || dims.ffn == 0 || dims.output == 0)
    throw UsageError("network dims must be positive (input, hidden, ffn, output)");
  blas::use_single_threaded();
  uint64_t largest = 0;
  for (const Param& p : network_params(dims)) {
    shapes_numel_.push_back(p.numel());
    largest = std::max(largest, p.numel());
  }
  grad_tmp_.resize(largest);
  dnorm_.resize(dims.hidden);
  if (compute_ == Compute::bf16) rounded_.resize(shapes_numel_.size());
}

void NetworkCompute::reserve(int64_t batch) {
  if (batch <= capacity_) return;
  const uint64_t B = uint64_t(batch), H = dims_.hidden, F = dims_.ffn, L = dims_.layers;
  h_.resize((L + 1) * B * H);
  inv_rms_.resize((L + 1) * B);
  normed_.resize((L + 1) * B * H);
  scaled_.resize((L + 1) * B * H);
  fc1_.resize(L * B * 2 * F);
  act_.resize(L * B * F);
  y_.resize(B * dims_.output);
  dy_.resize(B * dims_.output);
  dh_.resize(B * H);
  da_.resize(B * H);
  dact_.resize(B * F);
  dfc1_.resize(B * 2 * F);
  if (compute_ == Compute::bf16) {
    x16_.resize(B * dims_.input);
    dh16_.resize(B * H);
  }
  capacity_ = batch;
}

void NetworkCompute::check_params(const std::vector<const float*>& params, int64_t batch) const {
  if (params.size() != shapes_numel_.size())
    throw UsageError("the network takes " + std::to_string(shapes_numel_.size()) + " parameter arrays, got " +
                     std::to_string(params.size()));
  if (batch <= 0) throw UsageError("micro-batch size must be positive");
}

std::vector<const float*> NetworkCompute::bf16_params(const std::vector<const float*>& params) {
  std::vector<const float*> out(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const uint64_t n = shapes_numel_[i];
    if (bf16_exact(params[i], n)) {
      rounded_[i].clear();
      out[i] = params[i];
    } else {
      rounded_[i].resize(n);
      out[i] = rounded(true, params[i], int64_t(n), rounded_[i].data());
    }
  }
  return out;
}

void NetworkCompute::run_forward(const std::vector<const float*>& params_in, const float* x_in, int64_t batch) {
  reserve(batch);
  const bool bf16 = compute_ == Compute::bf16;
  if (bf16) p16_ = bf16_params(params_in);
  const std::vector<const float*>& params = bf16 ? p16_ : params_in;
  const int64_t B = batch, H = int64_t(dims_.hidden), F = int64_t(dims_.ffn), I = int64_t(dims_.input);
  const uint64_t L = dims_.layers;
  x_ = rounded(bf16, x_in, B * I, x16_.data());
  gemm_nt(B, H, I, x_, params[0], 0.0f, h_.data());
  for (uint64_t l = 0; l < L; ++l) {
    const float* h = h_.data() + l * B * H;
    float* normed = normed_.data() + l * B * H;
    float* scaled = scaled_.data() + l * B * H;
    rmsnorm_forward(h, params[norm_index(l)], B, H, inv_rms_.data() + l * B, normed, scaled);
    round_in_place(bf16, scaled, B * H);
    float* fc1 = fc1_.data() + l * B * 2 * F;
    gemm_nt(B, 2 * F, H, scaled, params[fc1_index(l)], 0.0f, fc1);
    round_in_place(bf16, fc1, B * 2 * F);
    float* act = act_.data() + l * B * F;
    for (int64_t b = 0; b < B; ++b) {
      const float* gate = fc1 + b * 2 * F;
      const float* up = gate + F;
      for (int64_t j = 0; j < F; ++j) act[b * F + j] = gate[j] * sigmoid(gate[j]) * up[j];
    }
    round_in_place(bf16, act, B * F);
    // Residual: h_{l+1} = h_l + act·W_fc2ᵀ (beta = 1 adds onto the copy).
    float* next = h_.data() + (l + 1) * B * H;
    std::copy(h, h + B * H, next);
    gemm_nt(B, H, F, act, params[fc2_index(l)], 1.0f, next);
  }
  const float* h = h_.data() + L * B * H;
  float* scaled = scaled_.data() + L * B * H;
  rmsnorm_forward(h, params[norm_index(L)], B, H, inv_rms_.data() + L * B, normed_.data() + L * B * H, scaled);
  round_in_place(bf16, scaled, B * H);
  gemm_nt(B, int64_t(dims_.output), H, scaled, params[2 + 3 * L], 0.0f, y_.data());
}

float NetworkCompute::mse(const float* target, int64_t batch, float* dy) {
  const int64_t n = batch * int64_t(dims_.output);
  const float scale = float(2.0 / double(n));
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = y_[i] - target[i];
    sum += double(d) * d;
    if (dy) dy[i] = d * scale;
  }
  return float(sum / double(n));
}

void NetworkCompute::forward(const std::vector<const float*>& params, const float* x, int64_t batch,
                             float* y) {
  check_params(params, batch);
  run_forward(params, x, batch);
  std::copy(y_.begin(), y_.begin() + batch * int64_t(dims_.output), y);
}

float NetworkCompute::loss(const std::vector<const float*>& params, const float* x, const float* target,
                           int64_t batch) {
  check_params(params, batch);
  run_forward(params, x, batch);
  return mse(target, batch, nullptr);
}

float* NetworkCompute::grad_out(const std::vector<float*>& grads, size_t i, GradMode mode) {
  return mode == GradMode::overwrite ? grads[i] : grad_tmp_.data();
}

void NetworkCompute::grad_done(const std::vector<float*>& grads, size_t i, GradMode mode) {
  if (mode == GradMode::overwrite) return;
  float* g = grads[i];
  const float* d = grad_tmp_.data();
  for (uint64_t k = 0, n = shapes_numel_[i]; k < n; ++k) g[k] += d[k];
}

float NetworkCompute::forward_backward(const std::vector<const float*>& params_in, const float* x,
                                       const float* target, int64_t batch, const std::vector<float*>& grads,
                                       GradMode mode) {
  check_params(params_in, batch);
  if (grads.size() != params_in.size())
    throw UsageError("the network takes " + std::to_string(params_in.size()) + " gradient arrays, got " +
                     std::to_string(grads.size()));
  run_forward(params_in, x, batch);
  const float loss_value = mse(target, batch, dy_.data());
  const bool bf16 = compute_ == Compute::bf16;
  const std::vector<const float*>& params = bf16 ? p16_ : params_in;  // as the forward read them

  const int64_t B = batch, H = int64_t(dims_.hidden), F = int64_t(dims_.ffn), O = int64_t(dims_.output);
  const uint64_t L = dims_.layers;
  auto store_norm_grad = [&](size_t i) {
    float* g = grad_out(grads, i, mode);
    for (int64_t j = 0; j < H; ++j) g[j] = float(dnorm_[j]);
    grad_done(grads, i, mode);
  };

  // Head: dW_out = dyᵀ·scaled_L, d(scaled_L) = dy·W_out; then the final norm starts dh.
  round_in_place(bf16, dy_.data(), B * O);  // dy only feeds the two GEMMs
  const size_t out_i = 2 + 3 * L;
  gemm_tn(O, H, B, dy_.data(), scaled_.data() + L * B * H, grad_out(grads, out_i, mode));
  grad_done(grads, out_i, mode);
  gemm_nn(B, H, O, dy_.data(), params[out_i], da_.data());
  std::fill(dh_.begin(), dh_.begin() + B * H, 0.0f);
  rmsnorm_backward(da_.data(), params[norm_index(L)], normed_.data() + L * B * H, inv_rms_.data() + L * B, B,
                   H, dh_.data(), dnorm_.data());
  store_norm_grad(norm_index(L));

  for (uint64_t l = L; l-- > 0;) {
    // dh is ∂/∂h_{l+1}; the residual passes it to h_l unchanged and the block adds its share.
    const float* act = act_.data() + l * B * F;
    const float* fc1 = fc1_.data() + l * B * 2 * F;
    const float* dh = rounded(bf16, dh_.data(), B * H, dh16_.data());  // the GEMMs' operand
    gemm_tn(H, F, B, dh, act, grad_out(grads, fc2_index(l), mode));
    grad_done(grads, fc2_index(l), mode);
    gemm_nn(B, F, H, dh, params[fc2_index(l)], dact_.data());
    // act = silu(gate)·up: d gate = d act·up·σ(1 + gate(1 − σ)), d up = d act·silu(gate).
    for (int64_t b = 0; b < B; ++b) {
      const float* gate = fc1 + b * 2 * F;
      const float* up = gate + F;
      const float* da = dact_.data() + b * F;
      float* dgate = dfc1_.data() + b * 2 * F;
      float* dup = dgate + F;
      for (int64_t j = 0; j < F; ++j) {
        const float s = sigmoid(gate[j]);
        dgate[j] = da[j] * up[j] * (s * (1.0f + gate[j] * (1.0f - s)));
        dup[j] = da[j] * (gate[j] * s);
      }
    }
    round_in_place(bf16, dfc1_.data(), B * 2 * F);
    const float* scaled = scaled_.data() + l * B * H;
    gemm_tn(2 * F, H, B, dfc1_.data(), scaled, grad_out(grads, fc1_index(l), mode));
    grad_done(grads, fc1_index(l), mode);
    gemm_nn(B, H, 2 * F, dfc1_.data(), params[fc1_index(l)], da_.data());
    rmsnorm_backward(da_.data(), params[norm_index(l)], normed_.data() + l * B * H, inv_rms_.data() + l * B,
                     B, H, dh_.data(), dnorm_.data());
    store_norm_grad(norm_index(l));
  }

  gemm_tn(H, int64_t(dims_.input), B, rounded(bf16, dh_.data(), B * H, dh16_.data()), x_, grad_out(grads, 0, mode));
  grad_done(grads, 0, mode);
  return loss_value;
}

std::vector<const float*> const_pointers(const std::vector<std::vector<float>>& arrays) {
  std::vector<const float*> p;
  p.reserve(arrays.size());
  for (const auto& a : arrays) p.push_back(a.data());
  return p;
}

std::vector<float*> pointers(std::vector<std::vector<float>>& arrays) {
  std::vector<float*> p;
  p.reserve(arrays.size());
  for (auto& a : arrays) p.push_back(a.data());
  return p;
}

}  // namespace fpg::model
