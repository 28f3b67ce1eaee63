// Block-scaled FP8 (e4m3fn) dequantize / quantize kernels. Same arithmetic as the CPU reference
// in quant_ops_cpu.cpp: scale_inv = amax(tile) / 448, q = clamp(w / scale_inv, +-448).

#include <cuda_fp8.h>

#include "cuda_launchers.h"

namespace graphcheck::kernels::cuda {
namespace {

constexpr float kFp8Max = 448.0f;

__global__ void fp8_dequant_kernel(const __nv_fp8_e4m3* q, const float* scale_inv, float* out,
                                   std::int64_t n, std::int64_t k, std::int64_t block,
                                   std::int64_t kb) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n * k) return;
  const std::int64_t r = i / k, c = i % k;
  out[i] = static_cast<float>(q[i]) * scale_inv[(r / block) * kb + c / block];
}

// One thread block per (block x block) tile: reduce amax, then write the quantized tile.
__global__ void fp8_quant_kernel(const float* w, __nv_fp8_e4m3* q, float* scale_inv,
                                 std::int64_t n, std::int64_t k, std::int64_t block,
                                 std::int64_t kb) {
  __shared__ float shared_amax[256];
  const std::int64_t tile_r = blockIdx.x / kb, tile_c = blockIdx.x % kb;
  const std::int64_t r0 = tile_r * block, c0 = tile_c * block;
  float amax = 0.0f;
  for (std::int64_t t = threadIdx.x; t < block * block; t += blockDim.x) {
    const std::int64_t r = r0 + t / block, c = c0 + t % block;
    if (r < n && c < k) amax = fmaxf(amax, fabsf(w[r * k + c]));
  }
  shared_amax[threadIdx.x] = amax;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared_amax[threadIdx.x] = fmaxf(shared_amax[threadIdx.x], shared_amax[threadIdx.x + s]);
    __syncthreads();
  }
  const float scale = fmaxf(shared_amax[0] / kFp8Max, 1e-12f);
  if (threadIdx.x == 0) scale_inv[blockIdx.x] = scale;
  for (std::int64_t t = threadIdx.x; t < block * block; t += blockDim.x) {
    const std::int64_t r = r0 + t / block, c = c0 + t % block;
    if (r < n && c < k) {
      q[r * k + c] = __nv_fp8_e4m3(fminf(fmaxf(w[r * k + c] / scale, -kFp8Max), kFp8Max));
    }
  }
}

}  // namespace

cudaError_t fp8_block_dequantize(const std::uint8_t* q, const float* scale_inv, float* out,
                                 std::int64_t n, std::int64_t k, std::int64_t block,
                                 cudaStream_t stream) {
  const std::int64_t total = n * k;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((total + threads - 1) / threads);
  fp8_dequant_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const __nv_fp8_e4m3*>(q),
                                                     scale_inv, out, n, k, block,
                                                     (k + block - 1) / block);
  return cudaGetLastError();
}

cudaError_t fp8_block_quantize(const float* w, std::uint8_t* q, float* scale_inv, std::int64_t n,
                               std::int64_t k, std::int64_t block, cudaStream_t stream) {
  const std::int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  if (nb * kb == 0) return cudaSuccess;
  fp8_quant_kernel<<<static_cast<unsigned>(nb * kb), 256, 0, stream>>>(
      w, reinterpret_cast<__nv_fp8_e4m3*>(q), scale_inv, n, k, block, kb);
  return cudaGetLastError();
}

}  // namespace graphcheck::kernels::cuda
