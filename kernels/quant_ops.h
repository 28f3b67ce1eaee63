#pragma once
// Quantized-weight ops used by the quantized fixtures (DESIGN §1.4): block-scaled FP8 and MXFP4.
// Registered with TORCH_LIBRARY as graphcheck::<name> so that the emulated backend records each as
// one op and they dispatch to CUDA on a GPU; these functions call the dispatcher.
//
// FP8 block scaling: weight [N, K] in float8_e4m3fn, one float32 weight_scale_inv per
// block x block tile; dequantised value = float(q) * scale_inv[n / block][k / block].
// MXFP4 (OCP MX): two E2M1 values per byte (element 2i in the low nibble, 2i+1 in the high one),
// one UE8M0 uint8 scale per 32 consecutive values along the last dim (ue8m0_decode below); value =
// e2m1 * scale, and a scale of 0xFF (the UE8M0 NaN) makes its 32 values NaN.

#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <tuple>

namespace graphcheck::kernels {

inline constexpr double kFp8E4m3Max = 448.0;
inline constexpr std::int64_t kMxBlock = 32;

// UE8M0 (OCP MX) scales: the byte e holds 2^(e - 127), and 0xFF is NaN. The one home of the
// encoding for host code (the CUDA kernels in mxfp4.cu decode it per element; `graphcheck
// inspect` prints it, safetensors_inspect.cpp).
inline constexpr int kUe8m0Bias = 127;
inline constexpr std::uint8_t kUe8m0Nan = 0xFF;
// uint8 UE8M0 bytes -> float32 scales.
inline torch::Tensor ue8m0_decode(const torch::Tensor& e) {
  const torch::Tensor value = torch::exp2(e.to(torch::kFloat32) - kUe8m0Bias);
  return torch::where(e == kUe8m0Nan, torch::full_like(value, std::nan("")), value);
}
// Integral exponents (float, within [-127, 127]; NaN for "no scale") -> uint8 UE8M0 bytes.
inline torch::Tensor ue8m0_encode(const torch::Tensor& exponent) {
  return torch::where(exponent.isnan(), torch::full_like(exponent, kUe8m0Nan), exponent + kUe8m0Bias)
      .to(torch::kUInt8);
}

// w [N, K] floating -> (q float8_e4m3fn [N, K], scale_inv float32 [ceil(N/b), ceil(K/b)]).
std::tuple<torch::Tensor, torch::Tensor> fp8_block_quantize(const torch::Tensor& w, std::int64_t block);
torch::Tensor fp8_block_dequantize(const torch::Tensor& q, const torch::Tensor& scale_inv,
                                   std::int64_t block);
// y [M, N] = x [M, K] @ dequantize(q, scale_inv)^T, float32.
torch::Tensor fp8_block_linear(const torch::Tensor& x, const torch::Tensor& q,
                               const torch::Tensor& scale_inv, std::int64_t block);

// w [..., K] floating, K % 32 == 0 -> (packed uint8 [..., K/2], scales uint8 [..., K/32]).
std::tuple<torch::Tensor, torch::Tensor> mxfp4_quantize(const torch::Tensor& w);
torch::Tensor mxfp4_dequantize(const torch::Tensor& packed, const torch::Tensor& scales);
// MoE over all experts, gated: x [B, H], w13 [E, 2I, H] and w2 [E, H, I] in MXFP4 (packed and
// scales), gates [B, E] -> [B, H] = sum_e gates[:, e] * (silu(x W1e^T) * (x W3e^T)) W2e^T.
torch::Tensor mxfp4_moe(const torch::Tensor& x, const torch::Tensor& w13_packed,
                        const torch::Tensor& w13_scales, const torch::Tensor& w2_packed,
                        const torch::Tensor& w2_scales, const torch::Tensor& gates);

}  // namespace graphcheck::kernels
