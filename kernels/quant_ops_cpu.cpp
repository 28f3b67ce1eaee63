// CPU reference implementations of the quantized ops, and their registration (schemas + CPU).

#include <torch/library.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include "quant_ops.h"

namespace graphcheck::kernels {
namespace {

torch::Tensor expand_tiles(const torch::Tensor& scale, std::int64_t n, std::int64_t k,
                           std::int64_t block) {
  return scale.repeat_interleave(block, 0).repeat_interleave(block, 1).narrow(0, 0, n).narrow(1, 0, k);
}

std::tuple<torch::Tensor, torch::Tensor> fp8_block_quantize_cpu(const torch::Tensor& w,
                                                                std::int64_t block) {
  TORCH_CHECK(w.dim() == 2, "fp8_block_quantize: weight must be 2-D [N, K], got ", w.sizes());
  TORCH_CHECK(block > 0, "fp8_block_quantize: block size must be positive");
  const std::int64_t n = w.size(0), k = w.size(1);
  const std::int64_t nb = (n + block - 1) / block, kb = (k + block - 1) / block;
  torch::Tensor padded = torch::zeros({nb * block, kb * block}, w.options().dtype(torch::kFloat32));
  padded.narrow(0, 0, n).narrow(1, 0, k).copy_(w);
  torch::Tensor amax = padded.view({nb, block, kb, block}).abs().amax({1, 3});
  torch::Tensor scale_inv = (amax / kFp8E4m3Max).clamp_min(1e-12);
  torch::Tensor scaled = w.to(torch::kFloat32) / expand_tiles(scale_inv, n, k, block);
  torch::Tensor q = scaled.clamp(-kFp8E4m3Max, kFp8E4m3Max).to(c10::ScalarType::Float8_e4m3fn);
  return {q, scale_inv};
}

torch::Tensor fp8_block_dequantize_cpu(const torch::Tensor& q, const torch::Tensor& scale_inv,
                                       std::int64_t block) {
  TORCH_CHECK(block > 0, "fp8_block_dequantize: block size must be positive, got ", block);
  TORCH_CHECK(q.scalar_type() == c10::ScalarType::Float8_e4m3fn,
              "fp8_block_dequantize: the weight must be float8_e4m3fn, got ", q.scalar_type());
  TORCH_CHECK(q.dim() == 2 && scale_inv.dim() == 2, "fp8_block_dequantize: 2-D tensors expected");
  const std::int64_t n = q.size(0), k = q.size(1);
  TORCH_CHECK(scale_inv.size(0) == (n + block - 1) / block && scale_inv.size(1) == (k + block - 1) / block,
              "fp8_block_dequantize: weight_scale_inv has shape ", scale_inv.sizes(),
              " but a ", q.sizes(), " weight with block ", block, " needs [",
              (n + block - 1) / block, ", ", (k + block - 1) / block, "]");
  return q.to(torch::kFloat32) * expand_tiles(scale_inv.to(torch::kFloat32), n, k, block);
}

torch::Tensor fp8_block_linear_cpu(const torch::Tensor& x, const torch::Tensor& q,
                                   const torch::Tensor& scale_inv, std::int64_t block) {
  return torch::matmul(x.to(torch::kFloat32), fp8_block_dequantize_cpu(q, scale_inv, block).t());
}

// E2M1 magnitudes by 3-bit code, and the midpoints used for round-to-nearest.
const float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
const float kE2m1Mid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

std::tuple<torch::Tensor, torch::Tensor> mxfp4_quantize_cpu(const torch::Tensor& w) {
  TORCH_CHECK(w.dim() >= 1 && w.size(-1) % kMxBlock == 0,
              "mxfp4_quantize: the last dim must be a multiple of 32, got ", w.sizes());
  auto sizes = w.sizes().vec();
  const std::int64_t k = sizes.back();
  std::vector<std::int64_t> blocked(sizes.begin(), sizes.end() - 1);
  blocked.push_back(k / kMxBlock);
  blocked.push_back(kMxBlock);
  torch::Tensor b = w.to(torch::kFloat32).reshape(blocked);
  torch::Tensor amax = b.abs().amax(-1);
  // Shared exponent: floor(log2(amax)) - 2 (emax of E2M1), clamped to the UE8M0 range.
  torch::Tensor exp = torch::where(amax > 0, torch::floor(torch::log2(amax)) - 2,
                                   torch::full_like(amax, -127))
                          .clamp(-127, 127);
  torch::Tensor scaled = b / torch::exp2(exp).unsqueeze(-1);
  torch::Tensor mids = torch::from_blob(const_cast<float*>(kE2m1Mid), {7}, torch::kFloat32);
  torch::Tensor idx = (scaled.abs().unsqueeze(-1) > mids).sum(-1).to(torch::kUInt8);  // 0..7
  torch::Tensor code = idx.bitwise_or((scaled < 0).to(torch::kUInt8) * 8);
  code = code.reshape(sizes);
  std::vector<std::int64_t> pairs(sizes.begin(), sizes.end() - 1);
  pairs.push_back(k / 2);
  pairs.push_back(2);
  torch::Tensor pc = code.reshape(pairs);
  torch::Tensor packed = pc.select(-1, 0).bitwise_or(pc.select(-1, 1) * 16);
  torch::Tensor scales = ue8m0_encode(exp);
  return {packed.contiguous(), scales.contiguous()};
}

torch::Tensor mxfp4_dequantize_cpu(const torch::Tensor& packed, const torch::Tensor& scales) {
  TORCH_CHECK(packed.scalar_type() == torch::kUInt8 && scales.scalar_type() == torch::kUInt8,
              "mxfp4_dequantize: packed values and scales must be uint8");
  TORCH_CHECK(packed.dim() >= 1 && scales.dim() == packed.dim(),
              "mxfp4_dequantize: packed ", packed.sizes(), " and scales ", scales.sizes(),
              " must have the same number of dims (at least 1)");
  auto sizes = packed.sizes().vec();
  const std::int64_t k = sizes.back() * 2;
  TORCH_CHECK(scales.size(-1) * kMxBlock == k,
              "mxfp4_dequantize: ", scales.size(-1), " scales cannot cover ", k, " values (one per 32)");
  TORCH_CHECK(scales.sizes().slice(0, scales.dim() - 1) == packed.sizes().slice(0, packed.dim() - 1),
              "mxfp4_dequantize: scales ", scales.sizes(), " do not match packed ", packed.sizes(),
              " in their leading dims");
  torch::Tensor lo = packed.bitwise_and(15), hi = packed.bitwise_right_shift(4);
  torch::Tensor code = torch::stack({lo, hi}, -1);
  sizes.back() = k;
  code = code.reshape(sizes).to(torch::kInt64);
  torch::Tensor lut = torch::from_blob(const_cast<float*>(kE2m1), {8}, torch::kFloat32);
  torch::Tensor mag = lut.index({code.bitwise_and(7)});
  torch::Tensor value = torch::where(code.bitwise_and(8) != 0, -mag, mag);
  return value * ue8m0_decode(scales).repeat_interleave(kMxBlock, -1);
}

torch::Tensor mxfp4_moe_cpu(const torch::Tensor& x, const torch::Tensor& w13_packed,
                            const torch::Tensor& w13_scales, const torch::Tensor& w2_packed,
                            const torch::Tensor& w2_scales, const torch::Tensor& gates) {
  torch::Tensor w13 = mxfp4_dequantize_cpu(w13_packed, w13_scales);  // [E, 2I, H]
  torch::Tensor w2 = mxfp4_dequantize_cpu(w2_packed, w2_scales);     // [E, H, I]
  const std::int64_t inter = w13.size(1) / 2;
  torch::Tensor h13 = torch::einsum("bh,ekh->ebk", {x.to(torch::kFloat32), w13});
  torch::Tensor h = torch::silu(h13.narrow(-1, 0, inter)) * h13.narrow(-1, inter, inter);
  torch::Tensor y = torch::einsum("ebi,ehi->ebh", {h, w2});
  return torch::einsum("be,ebh->bh", {gates.to(torch::kFloat32), y});
}

}  // namespace

// ---- dispatcher entry points ---------------------------------------------------------------

std::tuple<torch::Tensor, torch::Tensor> fp8_block_quantize(const torch::Tensor& w, std::int64_t block) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::fp8_block_quantize", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, int64_t)>();
  return op.call(w, block);
}
torch::Tensor fp8_block_dequantize(const torch::Tensor& q, const torch::Tensor& s, std::int64_t block) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::fp8_block_dequantize", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(q, s, block);
}
torch::Tensor fp8_block_linear(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& s,
                               std::int64_t block) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::fp8_block_linear", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, q, s, block);
}
std::tuple<torch::Tensor, torch::Tensor> mxfp4_quantize(const torch::Tensor& w) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::mxfp4_quantize", "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&)>();
  return op.call(w);
}
torch::Tensor mxfp4_dequantize(const torch::Tensor& packed, const torch::Tensor& scales) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::mxfp4_dequantize", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(packed, scales);
}
torch::Tensor mxfp4_moe(const torch::Tensor& x, const torch::Tensor& w13_packed,
                        const torch::Tensor& w13_scales, const torch::Tensor& w2_packed,
                        const torch::Tensor& w2_scales, const torch::Tensor& gates) {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("graphcheck::mxfp4_moe", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w13_packed, w13_scales, w2_packed, w2_scales, gates);
}

}  // namespace graphcheck::kernels

TORCH_LIBRARY(graphcheck, m) {
  m.def("fp8_block_quantize(Tensor w, int block) -> (Tensor, Tensor)");
  m.def("fp8_block_dequantize(Tensor q, Tensor scale_inv, int block) -> Tensor");
  m.def("fp8_block_linear(Tensor x, Tensor q, Tensor scale_inv, int block) -> Tensor");
  m.def("mxfp4_quantize(Tensor w) -> (Tensor, Tensor)");
  m.def("mxfp4_dequantize(Tensor packed, Tensor scales) -> Tensor");
  m.def("mxfp4_moe(Tensor x, Tensor w13_packed, Tensor w13_scales, Tensor w2_packed, "
        "Tensor w2_scales, Tensor gates) -> Tensor");
}

TORCH_LIBRARY_IMPL(graphcheck, CPU, m) {
  namespace k = graphcheck::kernels;
  m.impl("fp8_block_quantize", &k::fp8_block_quantize_cpu);
  m.impl("fp8_block_dequantize", &k::fp8_block_dequantize_cpu);
  m.impl("fp8_block_linear", &k::fp8_block_linear_cpu);
  m.impl("mxfp4_quantize", &k::mxfp4_quantize_cpu);
  m.impl("mxfp4_dequantize", &k::mxfp4_dequantize_cpu);
  m.impl("mxfp4_moe", &k::mxfp4_moe_cpu);
}
