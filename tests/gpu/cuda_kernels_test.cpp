// The CUDA kernels on a real device. Skipped, with the reason, where no CUDA device is usable.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_launchers.h"

namespace graphcheck::kernels::cuda {
namespace {

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device: " << (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
  }
};

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

TEST_F(CudaKernelsTest, Mxfp4RoundTripsRepresentableValuesExactly) {
  const std::int64_t rows = 4, k = 64;
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> w(rows * k);
  for (std::int64_t i = 0; i < rows * k; ++i) w[i] = (i % 2 ? -1.0f : 1.0f) * grid[i % 8] * 0.25f;
  float* dw = device_copy(w);
  std::uint8_t *packed = nullptr, *scales = nullptr;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&packed), rows * k / 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scales), rows * k / 32), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), rows * k * sizeof(float)), cudaSuccess);
  ASSERT_EQ(mxfp4_quantize(dw, packed, scales, rows, k, nullptr), cudaSuccess);
  ASSERT_EQ(mxfp4_dequantize(packed, scales, out, rows, k, nullptr), cudaSuccess);
  std::vector<float> back(rows * k);
  ASSERT_EQ(cudaMemcpy(back.data(), out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::int64_t i = 0; i < rows * k; ++i) EXPECT_EQ(back[i], w[i]) << i;
  cudaFree(dw);
  cudaFree(packed);
  cudaFree(scales);
  cudaFree(out);
}

TEST_F(CudaKernelsTest, Fp8BlockRoundTripWithinE4m3Precision) {
  const std::int64_t n = 48, k = 80, block = 32;
  std::vector<float> w(n * k);
  for (std::int64_t i = 0; i < n * k; ++i) w[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  const std::int64_t tiles = ((n + block - 1) / block) * ((k + block - 1) / block);
  float* dw = device_copy(w);
  std::uint8_t* q = nullptr;
  float *scale = nullptr, *out = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&q), n * k), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&scale), tiles * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), n * k * sizeof(float)), cudaSuccess);
  ASSERT_EQ(fp8_block_quantize(dw, q, scale, n, k, block, nullptr), cudaSuccess);
  ASSERT_EQ(fp8_block_dequantize(q, scale, out, n, k, block, nullptr), cudaSuccess);
  std::vector<float> back(n * k);
  ASSERT_EQ(cudaMemcpy(back.data(), out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (std::int64_t i = 0; i < n * k; ++i) {
    // e4m3: 3 mantissa bits, relative rounding error <= 2^-4, plus the subnormal spacing.
    EXPECT_LE(std::fabs(back[i] - w[i]), std::fabs(w[i]) * 0.0625f + 3.0f / 448.0f * 0.002f) << i;
  }
  cudaFree(dw);
  cudaFree(q);
  cudaFree(scale);
  cudaFree(out);
}

}  // namespace
}  // namespace graphcheck::kernels::cuda
