// MXFP4 (OCP MX, E2M1 values, UE8M0 scale per 32) pack / unpack kernels. Same arithmetic as the
// CPU reference in quant_ops_cpu.cpp.

#include "cuda_launchers.h"

namespace graphcheck::kernels::cuda {
namespace {

__constant__ float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
__constant__ float kE2m1Mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

__global__ void mxfp4_dequant_kernel(const std::uint8_t* packed, const std::uint8_t* scales,
                                     float* out, std::int64_t rows, std::int64_t k) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * k) return;
  const std::int64_t r = i / k, c = i % k;
  const std::uint8_t byte = packed[r * (k / 2) + c / 2];
  const std::uint8_t code = (c % 2 == 0) ? (byte & 15) : (byte >> 4);
  const float mag = kE2m1[code & 7];
  const std::uint8_t s = scales[r * (k / 32) + c / 32];
  const float scale = s == 0xFF ? __int_as_float(0x7fc00000) : exp2f(static_cast<float>(s) - 127.0f);  // 0xFF: NaN
  out[i] = ((code & 8) ? -mag : mag) * scale;
}

__global__ void mxfp4_quant_kernel(const float* w, std::uint8_t* packed, std::uint8_t* scales,
                                   std::int64_t rows, std::int64_t k) {
  const std::int64_t b = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t blocks_per_row = k / 32;
  if (b >= rows * blocks_per_row) return;
  const std::int64_t r = b / blocks_per_row, c0 = (b % blocks_per_row) * 32;
  const float* src = w + r * k + c0;
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(src[j]));
  float e = amax > 0.0f ? floorf(log2f(amax)) - 2.0f : -127.0f;
  e = fminf(fmaxf(e, -127.0f), 127.0f);
  scales[r * blocks_per_row + c0 / 32] = static_cast<std::uint8_t>(e + 127.0f);
  const float inv = exp2f(-e);
  for (int j = 0; j < 32; j += 2) {
    std::uint8_t codes[2];
    for (int h = 0; h < 2; ++h) {
      const float v = src[j + h] * inv;
      std::uint8_t idx = 0;
      for (int m = 0; m < 7; ++m) idx += fabsf(v) > kE2m1Mid[m];
      codes[h] = idx | (v < 0.0f ? 8 : 0);
    }
    packed[r * (k / 2) + (c0 + j) / 2] = codes[0] | (codes[1] << 4);
  }
}

}  // namespace

cudaError_t mxfp4_dequantize(const std::uint8_t* packed, const std::uint8_t* scales, float* out,
                             std::int64_t rows, std::int64_t k, cudaStream_t stream) {
  const std::int64_t total = rows * k;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  mxfp4_dequant_kernel<<<static_cast<unsigned>((total + threads - 1) / threads), threads, 0, stream>>>(
      packed, scales, out, rows, k);
  return cudaGetLastError();
}

cudaError_t mxfp4_quantize(const float* w, std::uint8_t* packed, std::uint8_t* scales,
                           std::int64_t rows, std::int64_t k, cudaStream_t stream) {
  const std::int64_t blocks = rows * (k / 32);
  if (blocks == 0) return cudaSuccess;
  const int threads = 128;
  mxfp4_quant_kernel<<<static_cast<unsigned>((blocks + threads - 1) / threads), threads, 0, stream>>>(
      w, packed, scales, rows, k);
  return cudaGetLastError();
}

}  // namespace graphcheck::kernels::cuda
