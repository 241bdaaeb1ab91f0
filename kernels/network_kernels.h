// The elementwise and reduction kernels of the built-in network on the GPU (lib/pipeline/device/device_network.h
// runs them between its cuBLAS GEMMs). Same math as model/network_compute.cpp, element by element; sums
// are fixed-order (a per-thread strided sum then a shared-memory tree, or a sequential column loop),
// never float atomics, so every call is reproducible bit for bit on the same GPU.
//
// All pointers are device memory; every launcher enqueues on `stream` and returns at once.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace fpg::cuda {

// Blocks of the first MSE pass; the second pass sums their partials in a fixed order.
inline constexpr int kMseBlocks = 128;

// Per row of [rows, width]: r = 1/sqrt(mean(h²) + eps) (the sum in double), normed = h·r,
// scaled = normed ⊙ w, inv_rms[row] = r.
void rmsnorm_forward(const float* h, const float* w, int64_t rows, int64_t width, float eps, float* inv_rms,
                     float* normed, float* scaled, cudaStream_t stream);

// dh += r·(ds ⊙ w − normed·mean(ds ⊙ w ⊙ normed)) per row (the dot in double).
void rmsnorm_backward_input(const float* dscaled, const float* w, const float* normed, const float* inv_rms,
                            int64_t rows, int64_t width, float* dh, cudaStream_t stream);

// dw[j] = float(Σ_rows double(ds[row, j])·normed[row, j]), rows in order: the CPU's sum, exactly.
void rmsnorm_weight_grad(const float* dscaled, const float* normed, int64_t rows, int64_t width, float* dw,
                         cudaStream_t stream);

// act[row, j] = silu(gate)·up with [gate | up] = fc1[row] of width 2·ffn.
void swiglu_forward(const float* fc1, int64_t rows, int64_t ffn, float* act, cudaStream_t stream);

// d gate = d act·up·σ(1 + gate(1 − σ)), d up = d act·silu(gate), into dfc1 [rows, 2·ffn].
void swiglu_backward(const float* fc1, const float* dact, int64_t rows, int64_t ffn, float* dfc1,
                     cudaStream_t stream);

// loss[0] = float(Σ double(y − t)² / n) over n elements, and dy = (y − t)·float(2/n) when dy is not
// null. partials: kMseBlocks doubles of scratch.
void mse_loss(const float* y, const float* target, int64_t n, double* partials, float* loss, float* dy,
              cudaStream_t stream);

// g[i] += d[i] (GradMode::accumulate: a whole gradient added after it is formed).
void add_inplace(float* g, const float* d, int64_t n, cudaStream_t stream);

}  // namespace fpg::cuda
