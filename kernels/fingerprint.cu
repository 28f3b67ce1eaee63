// Content fingerprint of device memory: each 8-byte lane is mixed with its index (a
// splitmix64-style finaliser) and the lanes are combined with a sum and a xor (order-free, so
// one pass of atomics suffices), then finalised with the byte count (fingerprint_lanes.h, the
// arithmetic the host shares). Position-dependent: moving a byte changes the hash.

#include "fingerprint_lanes.h"
#include "harness_kernels.h"

namespace graphcheck::kernels::cuda {
namespace {

__global__ void fingerprint_kernel(const std::uint8_t* data, std::uint64_t bytes, std::uint64_t first_lane,
                                   unsigned long long* acc) {
  const std::uint64_t count = (bytes + 7) / 8;
  lanes::Sums sums;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < count; i += stride) {
    unsigned long long v = 0;
    for (unsigned b = 0; b < 8 && i * 8 + b < bytes; ++b) {
      v |= static_cast<unsigned long long>(data[i * 8 + b]) << (8 * b);
    }
    sums.add(v, first_lane + i);
  }
  atomicAdd(&acc[0], sums.sum);
  atomicXor(&acc[1], sums.xr);
}

__global__ void finish_kernel(const unsigned long long* acc, std::uint64_t bytes,
                              unsigned long long* result) {
  *result = lanes::finish(acc[0], acc[1], bytes);
}

}  // namespace

cudaError_t fingerprint_lanes(const void* data, std::uint64_t bytes, std::uint64_t first_lane,
                              unsigned long long* sums, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  const std::uint64_t count = (bytes + 7) / 8;
  const unsigned grid = static_cast<unsigned>(count / 256 + 1 < 4096 ? count / 256 + 1 : 4096);
  fingerprint_kernel<<<grid, 256, 0, stream>>>(static_cast<const std::uint8_t*>(data), bytes, first_lane, sums);
  return cudaGetLastError();
}

cudaError_t fingerprint(const void* data, std::uint64_t bytes, unsigned long long* result,
                        cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(result, 0, 3 * sizeof(unsigned long long), stream);
  if (err != cudaSuccess) return err;
  err = fingerprint_lanes(data, bytes, 0, result + 1, stream);
  if (err != cudaSuccess) return err;
  finish_kernel<<<1, 1, 0, stream>>>(result + 1, bytes, result);
  return cudaGetLastError();
}

}  // namespace graphcheck::kernels::cuda
