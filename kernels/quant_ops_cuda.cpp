// CUDA implementations of the quantized ops: the dispatcher's CUDA kernels for graphcheck::*,
// wrapping the nvcc-compiled launchers (cuda_launchers.h) on the current stream, so that the ops
// run on a GPU and are recorded by CUDA graph capture. Compiled wherever nvcc is found, against
// any libtorch build: the code only runs for CUDA tensors, which need a CUDA build of libtorch.

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>

#include "cuda_launchers.h"
#include "quant_ops.h"

namespace graphcheck::kernels {
namespace {

cudaStream_t current_stream(const at::Tensor& t) {
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return static_cast<cudaStream_t>(impl.getStream(t.device()).native_handle());
}

void check_launch(cudaError_t err, const char* op) {
  TORCH_CHECK(err == cudaSuccess, "graphcheck::", op, ": CUDA kernel launch failed: ",
              cudaGetErrorString(err));
}

std::int64_t blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

void check_same_device(const char* op, const at::Tensor& a, const at::Tensor& b) {
  TORCH_CHECK(a.device() == b.device(), "graphcheck::", op, ": tensors on ", a.device(), " and ",
              b.device(), ": move them to one CUDA device");
}

std::tuple<at::Tensor, at::Tensor> fp8_block_quantize_cuda(const at::Tensor& w, std::int64_t block) {
  TORCH_CHECK(w.dim() == 2, "fp8_block_quantize: weight must be 2-D [N, K], got ", w.sizes());
  TORCH_CHECK(block > 0, "fp8_block_quantize: block size must be positive");
  const c10::OptionalDeviceGuard guard(w.device());
  const at::Tensor wf = w.to(at::kFloat).contiguous();
  const std::int64_t n = w.size(0), k = w.size(1);
  TORCH_CHECK(n > 0 && k > 0, "fp8_block_quantize: weight ", w.sizes(), " is empty");
  at::Tensor q = at::empty({n, k}, w.options().dtype(c10::ScalarType::Float8_e4m3fn));
  at::Tensor scale_inv = at::empty({blocks(n, block), blocks(k, block)}, w.options().dtype(at::kFloat));
  check_launch(cuda::fp8_block_quantize(wf.data_ptr<float>(), static_cast<std::uint8_t*>(q.data_ptr()),
                                        scale_inv.data_ptr<float>(), n, k, block, current_stream(w)),
               "fp8_block_quantize");
  return {q, scale_inv};
}

at::Tensor fp8_block_dequantize_cuda(const at::Tensor& q, const at::Tensor& scale_inv, std::int64_t block) {
  TORCH_CHECK(block > 0, "fp8_block_dequantize: block size must be positive, got ", block);
  TORCH_CHECK(q.scalar_type() == c10::ScalarType::Float8_e4m3fn,
              "fp8_block_dequantize: the weight must be float8_e4m3fn, got ", q.scalar_type());
  TORCH_CHECK(q.dim() == 2 && scale_inv.dim() == 2, "fp8_block_dequantize: 2-D tensors expected");
  check_same_device("fp8_block_dequantize", q, scale_inv);
  const c10::OptionalDeviceGuard guard(q.device());
  const std::int64_t n = q.size(0), k = q.size(1);
  if (n == 0 || k == 0) return at::empty({n, k}, q.options().dtype(at::kFloat));
  TORCH_CHECK(scale_inv.size(0) == blocks(n, block) && scale_inv.size(1) == blocks(k, block),
              "fp8_block_dequantize: weight_scale_inv has shape ", scale_inv.sizes(), " but a ",
              q.sizes(), " weight with block ", block, " needs [", blocks(n, block), ", ",
              blocks(k, block), "]");
  const at::Tensor qc = q.contiguous();
  const at::Tensor sc = scale_inv.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({n, k}, q.options().dtype(at::kFloat));
  check_launch(cuda::fp8_block_dequantize(static_cast<const std::uint8_t*>(qc.data_ptr()),
                                          sc.data_ptr<float>(), out.data_ptr<float>(), n, k, block,
                                          current_stream(q)),
               "fp8_block_dequantize");
  return out;
}

at::Tensor fp8_block_linear_cuda(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scale_inv,
                                 std::int64_t block) {
  return at::matmul(x.to(at::kFloat), fp8_block_dequantize_cuda(q, scale_inv, block).t());
}

std::tuple<at::Tensor, at::Tensor> mxfp4_quantize_cuda(const at::Tensor& w) {
  TORCH_CHECK(w.dim() >= 1 && w.size(-1) % kMxBlock == 0,
              "mxfp4_quantize: the last dim must be a multiple of 32, got ", w.sizes());
  if (w.numel() == 0) {
    auto empty_sizes = w.sizes().vec();
    empty_sizes.back() /= 2;
    auto empty_scales = w.sizes().vec();
    empty_scales.back() /= kMxBlock;
    return {at::empty(empty_sizes, w.options().dtype(at::kByte)), at::empty(empty_scales, w.options().dtype(at::kByte))};
  }
  const c10::OptionalDeviceGuard guard(w.device());
  const at::Tensor wf = w.to(at::kFloat).contiguous();
  const std::int64_t k = w.size(-1), rows = w.numel() / k;
  auto packed_sizes = w.sizes().vec();
  auto scale_sizes = w.sizes().vec();
  packed_sizes.back() = k / 2;
  scale_sizes.back() = k / kMxBlock;
  at::Tensor packed = at::empty(packed_sizes, w.options().dtype(at::kByte));
  at::Tensor scales = at::empty(scale_sizes, w.options().dtype(at::kByte));
  check_launch(cuda::mxfp4_quantize(wf.data_ptr<float>(), packed.data_ptr<std::uint8_t>(),
                                    scales.data_ptr<std::uint8_t>(), rows, k, current_stream(w)),
               "mxfp4_quantize");
  return {packed, scales};
}

at::Tensor mxfp4_dequantize_cuda(const at::Tensor& packed, const at::Tensor& scales) {
  TORCH_CHECK(packed.scalar_type() == at::kByte && scales.scalar_type() == at::kByte,
              "mxfp4_dequantize: packed values and scales must be uint8");
  TORCH_CHECK(packed.dim() >= 1 && scales.dim() == packed.dim(), "mxfp4_dequantize: packed ",
              packed.sizes(), " and scales ", scales.sizes(),
              " must have the same number of dims (at least 1)");
  const std::int64_t k = packed.size(-1) * 2;
  TORCH_CHECK(scales.size(-1) * kMxBlock == k, "mxfp4_dequantize: ", scales.size(-1),
              " scales cannot cover ", k, " values (one per 32)");
  TORCH_CHECK(scales.sizes().slice(0, scales.dim() - 1) == packed.sizes().slice(0, packed.dim() - 1),
              "mxfp4_dequantize: scales ", scales.sizes(), " do not match packed ", packed.sizes(),
              " in their leading dims");
  check_same_device("mxfp4_dequantize", packed, scales);
  const c10::OptionalDeviceGuard guard(packed.device());
  auto sizes = packed.sizes().vec();
  sizes.back() = k;
  if (packed.numel() == 0) return at::empty(sizes, packed.options().dtype(at::kFloat));
  const at::Tensor pc = packed.contiguous();
  const at::Tensor scl = scales.contiguous();
  at::Tensor out = at::empty(sizes, packed.options().dtype(at::kFloat));
  check_launch(cuda::mxfp4_dequantize(pc.data_ptr<std::uint8_t>(), scl.data_ptr<std::uint8_t>(),
                                      out.data_ptr<float>(), packed.numel() / packed.size(-1), k,
                                      current_stream(packed)),
               "mxfp4_dequantize");
  return out;
}

at::Tensor mxfp4_moe_cuda(const at::Tensor& x, const at::Tensor& w13_packed, const at::Tensor& w13_scales,
                          const at::Tensor& w2_packed, const at::Tensor& w2_scales, const at::Tensor& gates) {
  const at::Tensor w13 = mxfp4_dequantize_cuda(w13_packed, w13_scales);  // [E, 2I, H]
  const at::Tensor w2 = mxfp4_dequantize_cuda(w2_packed, w2_scales);     // [E, H, I]
  const std::int64_t inter = w13.size(1) / 2;
  const at::Tensor h13 = at::einsum("bh,ekh->ebk", {x.to(at::kFloat), w13});
  const at::Tensor h = at::silu(h13.narrow(-1, 0, inter)) * h13.narrow(-1, inter, inter);
  const at::Tensor y = at::einsum("ebi,ehi->ebh", {h, w2});
  return at::einsum("be,ebh->bh", {gates.to(at::kFloat), y});
}

}  // namespace
}  // namespace graphcheck::kernels

TORCH_LIBRARY_IMPL(graphcheck, CUDA, m) {
  namespace k = graphcheck::kernels;
  m.impl("fp8_block_quantize", &k::fp8_block_quantize_cuda);
  m.impl("fp8_block_dequantize", &k::fp8_block_dequantize_cuda);
  m.impl("fp8_block_linear", &k::fp8_block_linear_cuda);
  m.impl("mxfp4_quantize", &k::mxfp4_quantize_cuda);
  m.impl("mxfp4_dequantize", &k::mxfp4_dequantize_cuda);
  m.impl("mxfp4_moe", &k::mxfp4_moe_cuda);
}
