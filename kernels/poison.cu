// Poison fill and survivor scan for CUDA tensors (the poison probe's and the write census's
// work on device memory). Same rule as harness/src/poison.cpp: an element survives when every
// one of its bytes is the poison byte, unless its expected value is the pattern itself.

#include <climits>

#include "harness_kernels.h"

namespace graphcheck::kernels::cuda {
namespace {

__global__ void fill_kernel(std::uint8_t* data, std::uint64_t bytes, std::uint8_t byte) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x;
       i < bytes; i += stride) {
    data[i] = byte;
  }
}

template <class Word>
__device__ bool all_bytes(Word w, std::uint8_t byte) {
  Word pattern = 0;
  for (unsigned b = 0; b < sizeof(Word); ++b) pattern |= static_cast<Word>(byte) << (8 * b);
  return w == pattern;
}

template <class Word>
__global__ void scan_kernel(const Word* data, const Word* expected, std::int64_t elements,
                            std::uint8_t byte, unsigned long long* result) {
  unsigned long long count = 0, first = LLONG_MAX;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       i < elements; i += stride) {
    if (!all_bytes(data[i], byte)) continue;
    if (expected != nullptr && all_bytes(expected[i], byte)) continue;
    ++count;
    if (static_cast<unsigned long long>(i) < first) first = static_cast<unsigned long long>(i);
  }
  if (count != 0) {
    atomicAdd(&result[0], count);
    atomicMin(&result[1], first);
  }
}

__global__ void init_result(unsigned long long* result) {
  result[0] = 0;
  result[1] = LLONG_MAX;
}

unsigned grid_for(std::int64_t n, int threads) {
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

cudaError_t poison_fill(void* data, std::uint64_t bytes, std::uint8_t byte, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  fill_kernel<<<grid_for(static_cast<std::int64_t>(bytes), 256), 256, 0, stream>>>(
      static_cast<std::uint8_t*>(data), bytes, byte);
  return cudaGetLastError();
}

cudaError_t poison_scan(const void* data, const void* expected, std::int64_t elements,
                        int element_size, std::uint8_t byte, unsigned long long* result,
                        cudaStream_t stream) {
  init_result<<<1, 1, 0, stream>>>(result);
  if (elements > 0) {
    const unsigned grid = grid_for(elements, 256);
    switch (element_size) {
      case 1:
        scan_kernel<<<grid, 256, 0, stream>>>(static_cast<const std::uint8_t*>(data),
                                              static_cast<const std::uint8_t*>(expected), elements,
                                              byte, result);
        break;
      case 2:
        scan_kernel<<<grid, 256, 0, stream>>>(static_cast<const std::uint16_t*>(data),
                                              static_cast<const std::uint16_t*>(expected), elements,
                                              byte, result);
        break;
      case 4:
        scan_kernel<<<grid, 256, 0, stream>>>(static_cast<const std::uint32_t*>(data),
                                              static_cast<const std::uint32_t*>(expected), elements,
                                              byte, result);
        break;
      case 8:
        scan_kernel<<<grid, 256, 0, stream>>>(static_cast<const unsigned long long*>(data),
                                              static_cast<const unsigned long long*>(expected),
                                              elements, byte, result);
        break;
      default:
        return cudaErrorInvalidValue;
    }
  }
  return cudaGetLastError();
}

}  // namespace graphcheck::kernels::cuda
