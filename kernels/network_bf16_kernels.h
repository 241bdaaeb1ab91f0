// The elementwise and reduction kernels of the built-in network under `--compute bf16`
// (lib/pipeline/device/device_network_bf16.h runs them between its cuBLASLt GEMMs): the math of
// model/network_compute.cpp's bf16 path, element by element, reading and writing bf16 where that path
// rounds (core/float_codec.h's bf16_from_float, as the CPU), everything else in fp32. Sums are
// fixed-order (network_reduce.cuh), never atomics: every call repeats bit for bit on one GPU.
//
// bf16 arrays are uint16_t bit patterns. All pointers are device memory; every launcher enqueues on
// `stream` and returns at once.
#pragma once

#include <cstdint>

#include "kernels/stream.h"

namespace fpg::cuda {

// Per row of [rows, width]: r = 1/sqrt(mean(h²) + eps) (the sum in double), inv_rms[row] = r,
// scaled = bf16((h·r)·w). rmsnorm(h) = h·r is not stored: the backward recomputes it from h and r.
void rmsnorm_forward_bf16(const float* h, const uint16_t* w, int64_t rows, int64_t width, float eps, float* inv_rms,
                          uint16_t* scaled, cudaStream_t stream);

// Per row, with n = h·r: dh += r·(ds ⊙ w − n·mean(ds ⊙ w ⊙ n)) (the dot in double), then dh16 =
// bf16(dh), the operand of the GEMMs that read dh.
void rmsnorm_backward_bf16(const float* dscaled, const uint16_t* w, const float* h, const float* inv_rms,
                           int64_t rows, int64_t width, float* dh, uint16_t* dh16, cudaStream_t stream);

// dw[j] = float(Σ_rows double(ds[row, j])·n[row, j]) with n = h·r, rows in order (the CPU's sum,
// exactly); accumulate: dw[j] += that float instead.
void rmsnorm_weight_grad_bf16(const float* dscaled, const float* h, const float* inv_rms, int64_t rows,
                              int64_t width, bool accumulate, float* dw, cudaStream_t stream);

// act = bf16(silu(gate)·up) with [gate | up] = fc1[row] of width 2·ffn (bf16).
void swiglu_forward_bf16(const uint16_t* fc1, int64_t rows, int64_t ffn, uint16_t* act, cudaStream_t stream);

// d gate = bf16(d act·up·σ(1 + gate(1 − σ))), d up = bf16(d act·silu(gate)), into dfc1 [rows, 2·ffn];
// d act fp32.
void swiglu_backward_bf16(const uint16_t* fc1, const float* dact, int64_t rows, int64_t ffn, uint16_t* dfc1,
                          cudaStream_t stream);

}  // namespace fpg::cuda
