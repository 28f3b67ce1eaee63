#include "backends/cuda_tensor_ops.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "harness_kernels.h"

namespace graphcheck::cuda_ops {
namespace {

void check(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, "graphcheck: ", what,
              " kernel failed: ", cudaGetErrorString(err));
}

}  // namespace

void fill_bytes(const torch::Tensor& t, std::uint8_t byte) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(),
              "graphcheck: fill_bytes needs a contiguous CUDA tensor");
  const c10::cuda::CUDAGuard guard(t.device());
  check(
      kernels::cuda::poison_fill(t.data_ptr(), t.nbytes(), byte, at::cuda::getCurrentCUDAStream()),
      "poison fill");
}

ScanResult scan_poison(const torch::Tensor& t, const torch::Tensor& expected, std::uint8_t byte) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(),
              "graphcheck: scan_poison needs a contiguous CUDA tensor");
  const c10::cuda::CUDAGuard guard(t.device());
  torch::Tensor exp;
  if (expected.defined()) exp = expected.to(t.device()).contiguous();
  torch::Tensor result = torch::empty({2}, t.options().dtype(torch::kInt64));
  check(kernels::cuda::poison_scan(t.data_ptr(), exp.defined() ? exp.data_ptr() : nullptr,
                                   t.numel(), static_cast<int>(t.element_size()), byte,
                                   reinterpret_cast<unsigned long long*>(result.data_ptr()),
                                   at::cuda::getCurrentCUDAStream()),
        "poison scan");
  const torch::Tensor host = result.cpu();  // two words
  ScanResult r;
  r.count = host[0].item<std::int64_t>();
  const std::int64_t first = host[1].item<std::int64_t>();
  r.first = first == std::numeric_limits<std::int64_t>::max() ? -1 : first;
  return r;
}

std::uint64_t fingerprint(const torch::Tensor& tensor) {
  TORCH_CHECK(tensor.is_cuda(), "graphcheck: fingerprint of a CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(tensor.device());
  const torch::Tensor t = tensor.contiguous();
  torch::Tensor result = torch::empty({3}, t.options().dtype(torch::kInt64));
  check(kernels::cuda::fingerprint(t.data_ptr(), t.nbytes(),
                                   reinterpret_cast<unsigned long long*>(result.data_ptr()),
                                   at::cuda::getCurrentCUDAStream()),
        "fingerprint");
  return static_cast<std::uint64_t>(result[0].item<std::int64_t>());
}

}  // namespace graphcheck::cuda_ops
