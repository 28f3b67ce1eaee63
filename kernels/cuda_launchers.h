#pragma once
// Host-side launchers of the CUDA kernels (fp8_block.cu, mxfp4.cu). Plain pointers, no torch:
// the .cu files compile with nvcc alone; the torch CUDA registration wraps these.

#include <cstdint>

#include <cuda_runtime_api.h>

namespace graphcheck::kernels::cuda {

// q: float8_e4m3fn bytes [n, k]; scale_inv: float [ceil(n/b), ceil(k/b)]; out: float [n, k].
cudaError_t fp8_block_dequantize(const std::uint8_t* q, const float* scale_inv, float* out,
                                 std::int64_t n, std::int64_t k, std::int64_t block,
                                 cudaStream_t stream);
// w: float [n, k] -> q bytes [n, k], scale_inv [ceil(n/b), ceil(k/b)]; one thread block per tile.
cudaError_t fp8_block_quantize(const float* w, std::uint8_t* q, float* scale_inv, std::int64_t n,
                               std::int64_t k, std::int64_t block, cudaStream_t stream);
// packed: [rows, k/2] bytes, scales: [rows, k/32] UE8M0 -> out float [rows, k].
cudaError_t mxfp4_dequantize(const std::uint8_t* packed, const std::uint8_t* scales, float* out,
                             std::int64_t rows, std::int64_t k, cudaStream_t stream);
// w float [rows, k] -> packed [rows, k/2], scales [rows, k/32]; one thread per 32-value block.
cudaError_t mxfp4_quantize(const float* w, std::uint8_t* packed, std::uint8_t* scales,
                           std::int64_t rows, std::int64_t k, cudaStream_t stream);

}  // namespace graphcheck::kernels::cuda
