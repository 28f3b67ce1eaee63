// The quantized ops' CPU implementations against float64 references, with the error bounds
// stated next to each check.

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "address_index.h"
#include "backends/emulated_backend.h"
#include "fingerprint_lanes.h"
#include "graphcheck/model.h"
#include "quant_ops.h"

namespace graphcheck::kernels {
namespace {

torch::Tensor tile_scales(const torch::Tensor& s, std::int64_t n, std::int64_t k, std::int64_t b) {
  return s.to(torch::kFloat64).repeat_interleave(b, 0).repeat_interleave(b, 1).narrow(0, 0, n).narrow(1, 0, k);
}

TEST(Fp8Block, QuantizeDequantizeWithinE4m3Precision) {
  torch::manual_seed(1);
  const std::int64_t n = 70, k = 150, block = 32;  // ragged last tiles
  torch::Tensor w = torch::randn({n, k}) * 3;
  auto [q, s] = fp8_block_quantize(w, block);
  EXPECT_EQ(q.scalar_type(), c10::ScalarType::Float8_e4m3fn);
  EXPECT_EQ(s.sizes(), (std::vector<std::int64_t>{3, 5}));
  torch::Tensor deq = fp8_block_dequantize(q, s, block).to(torch::kFloat64);
  torch::Tensor w64 = w.to(torch::kFloat64);
  // Bound: e4m3 keeps 3 mantissa bits, so rounding is within 2^-4 relative; below the normal
  // range the spacing is 2^-9 (times the tile scale), half of it absolute.
  torch::Tensor bound = w64.abs() * std::ldexp(1.0, -4) + tile_scales(s, n, k, block) * std::ldexp(1.0, -10);
  EXPECT_TRUE(torch::all((deq - w64).abs() <= bound).item<bool>())
      << "max excess " << ((deq - w64).abs() - bound).max().item<double>();
  // The tile maximum maps onto 448 exactly.
  EXPECT_NEAR(deq.abs().max().item<double>(), w64.abs().max().item<double>(), 1e-6 * w64.abs().max().item<double>());
}

TEST(Fp8Block, LinearMatchesFloat64OnTheDequantizedWeights) {
  torch::manual_seed(2);
  const std::int64_t m = 5, n = 40, k = 96, block = 32;
  torch::Tensor x = torch::randn({m, k});
  auto [q, s] = fp8_block_quantize(torch::randn({n, k}), block);
  torch::Tensor y = fp8_block_linear(x, q, s, block).to(torch::kFloat64);
  torch::Tensor w64 = fp8_block_dequantize(q, s, block).to(torch::kFloat64);
  torch::Tensor y64 = torch::matmul(x.to(torch::kFloat64), w64.t());
  // Bound: float32 accumulation over k terms, |err| <= k * 2^-24 * (|x| @ |w|^T).
  torch::Tensor bound = torch::matmul(x.to(torch::kFloat64).abs(), w64.abs().t()) * (k * std::ldexp(1.0, -24));
  EXPECT_TRUE(torch::all((y - y64).abs() <= bound).item<bool>());
}

TEST(Fp8Block, MismatchedScaleShapeIsAnError) {
  auto [q, s] = fp8_block_quantize(torch::randn({64, 64}), 32);
  try {
    (void)fp8_block_dequantize(q, s.narrow(0, 0, 1), 32);
    FAIL() << "a scale of the wrong shape must be rejected";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight_scale_inv has shape"), std::string::npos);
  }
}

TEST(Mxfp4, PacksTwoE2m1ValuesPerByteLowNibbleFirst) {
  torch::Tensor w = torch::zeros({32});
  w[0] = 0.5;   // code 1
  w[1] = -6.0;  // code 8 | 7 = 15
  auto [packed, scales] = mxfp4_quantize(w);
  ASSERT_EQ(packed.sizes(), (std::vector<std::int64_t>{16}));
  ASSERT_EQ(scales.sizes(), (std::vector<std::int64_t>{1}));
  EXPECT_EQ(scales[0].item<int>(), 127);  // amax 6: floor(log2 6) - 2 = 0
  EXPECT_EQ(packed[0].item<int>(), 1 | (15 << 4));
}

TEST(Mxfp4, Ue8m0NanScaleMakesItsBlockNan) {
  torch::Tensor packed = torch::full({64}, 1 | (1 << 4), torch::kUInt8);  // every value 0.5
  torch::Tensor scales = torch::tensor({127, 255, 128, 255}, torch::kUInt8);
  torch::Tensor out = mxfp4_dequantize(packed, scales);
  EXPECT_TRUE(out.slice(0, 0, 32).eq(0.5).all().item<bool>());
  EXPECT_TRUE(out.slice(0, 32, 64).isnan().all().item<bool>());
  EXPECT_TRUE(out.slice(0, 64, 96).eq(1.0).all().item<bool>());
  EXPECT_TRUE(out.slice(0, 96, 128).isnan().all().item<bool>());
}

TEST(Mxfp4, RepresentableValuesRoundTripExactly) {
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  torch::Tensor w = torch::empty({3, 64});
  for (int i = 0; i < 3 * 64; ++i) {
    w.view(-1)[i] = (i % 2 ? -1.0f : 1.0f) * grid[i % 8] * std::ldexp(1.0f, (i / 64) - 1);
  }
  auto [packed, scales] = mxfp4_quantize(w);
  EXPECT_TRUE(torch::equal(mxfp4_dequantize(packed, scales), w));
}

TEST(Mxfp4, RandomValuesWithinHalfTheBlockMaximum) {
  torch::manual_seed(3);
  torch::Tensor w = torch::randn({4, 8, 128});
  auto [packed, scales] = mxfp4_quantize(w);
  torch::Tensor deq = mxfp4_dequantize(packed, scales).to(torch::kFloat64);
  torch::Tensor err = (deq - w.to(torch::kFloat64)).abs().view({4, 8, 4, 32});
  // Bound: with shared exponent e = floor(log2(amax)) - 2, grid steps are at most 2^(e+1), so
  // rounding is within 2^e; values above 6 * 2^e saturate, within 2^(e+1). 2^(e+1) <= amax / 2.
  torch::Tensor e = scales.to(torch::kFloat64) - 127;
  torch::Tensor bound = torch::exp2(e + 1).unsqueeze(-1);
  EXPECT_TRUE(torch::all(err <= bound).item<bool>()) << "max excess " << (err - bound).max().item<double>();
}

TEST(Mxfp4, MoeMatchesFloat64OnTheDequantizedWeights) {
  torch::manual_seed(4);
  const std::int64_t b = 3, h = 64, inter = 32, e = 4;
  torch::Tensor x = torch::randn({b, h});
  auto [w13p, w13s] = mxfp4_quantize(torch::randn({e, 2 * inter, h}) * 0.1);
  auto [w2p, w2s] = mxfp4_quantize(torch::randn({e, h, inter}) * 0.1);
  torch::Tensor gates = torch::softmax(torch::randn({b, e}), -1);
  torch::Tensor y = mxfp4_moe(x, w13p, w13s, w2p, w2s, gates).to(torch::kFloat64);

  torch::Tensor w13 = mxfp4_dequantize(w13p, w13s).to(torch::kFloat64);
  torch::Tensor w2 = mxfp4_dequantize(w2p, w2s).to(torch::kFloat64);
  torch::Tensor x64 = x.to(torch::kFloat64);
  torch::Tensor ref = torch::zeros({b, h}, torch::kFloat64);
  for (std::int64_t i = 0; i < e; ++i) {
    torch::Tensor h13 = torch::matmul(x64, w13[i].t());
    torch::Tensor act = torch::silu(h13.narrow(1, 0, inter)) * h13.narrow(1, inter, inter);
    ref += gates.to(torch::kFloat64).select(1, i).unsqueeze(1) * torch::matmul(act, w2[i].t());
  }
  // Bound: float32 arithmetic through two matmuls of depth <= 64: 1e-5 relative to max |ref|.
  EXPECT_LE((y - ref).abs().max().item<double>(), 1e-5 * ref.abs().max().item<double>());
}

// A captured forward records the custom op (it dispatches through TORCH_LIBRARY) and reads the
// quantized weight and scale as pinned constants.
class Fp8Model : public LifecycleModel {
 public:
  Fp8Model() {
    auto [q, s] = fp8_block_quantize(torch::randn({16, 32}), 16);
    m_q = m_module.register_parameter("weight", q, false);
    m_s = m_module.register_parameter("weight_scale_inv", s, false);
  }
  torch::nn::Module& module() override { return m_module; }
  std::set<std::string> load_weights(WeightStream& w) override { return load_module_weights(*this, w); }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override { return fp8_block_linear(x, m_q, m_s, 16); }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 32}); }
  torch::nn::Module m_module;
  torch::Tensor m_q, m_s;
};

TEST(QuantOpsCapture, EmulatedBackendReplaysTheCustomOpAndSeesScaleUpdates) {
  torch::NoGradGuard no_grad;
  Fp8Model model;
  auto backend = make_emulated_backend();
  torch::Tensor x = torch::randn({2, 32});
  auto graph = backend->capture(model, {x}, x.size(0));
  std::set<std::string> names;
  for (const auto& r : resolve_reads(graph->reads(), AddressIndex(live_tensors(model)))) names.insert(r.name);
  EXPECT_EQ(names, (std::set<std::string>{"weight", "weight_scale_inv"}));
  model.m_s.mul_(2);  // in place: replay must see it
  graph->static_inputs()[0].copy_(x);
  graph->replay();
  EXPECT_TRUE(torch::allclose(graph->static_outputs()[0], model.forward(x)));
}

// Every op has a CPU kernel, and a CUDA kernel wherever nvcc compiled the .cu files, so that on a
// GPU the ops dispatch to CUDA (checked here through the dispatcher; the kernels themselves run
// in tests/gpu/, on a device).
TEST(QuantOpsRegistration, EveryOpHasItsKernels) {
  for (const char* name : {"graphcheck::fp8_block_quantize", "graphcheck::fp8_block_dequantize",
                           "graphcheck::fp8_block_linear", "graphcheck::mxfp4_quantize",
                           "graphcheck::mxfp4_dequantize", "graphcheck::mxfp4_moe"}) {
    auto op = c10::Dispatcher::singleton().findSchema({name, ""});
    ASSERT_TRUE(op.has_value()) << name;
    EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CPU)) << name;
#if defined(GRAPHCHECK_HAS_CUDA_KERNELS)
    EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) << name;
#else
    EXPECT_FALSE(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA)) << name;
#endif
  }
}

// Note [Device fingerprints in pieces]: a fingerprint taken in segments of any length (the pieces
// of a view: rows of odd bytes, single elements, empty ones) is the fingerprint of the whole, with
// the kernel's part (whole lanes at their index) played here by the same arithmetic on the host.
// Its reference is the kernel's definition, written out: every lane of the whole, zero past the end.
TEST(DeviceFingerprintLanes, SegmentsOfAnyLengthAddUpToTheWhole) {
  const auto reference = [](const std::vector<unsigned char>& data) {
    lanes::Sums s;
    for (std::uint64_t i = 0; i * 8 < data.size(); ++i) {
      unsigned long long v = 0;
      for (std::uint64_t b = 0; b < 8 && i * 8 + b < data.size(); ++b) {
        v |= static_cast<unsigned long long>(data[i * 8 + b]) << (8 * b);
      }
      s.add(v, i);
    }
    return lanes::finish(s.sum, s.xr, data.size());
  };
  const auto in_segments = [](const std::vector<unsigned char>& data, const std::vector<std::uint64_t>& lengths) {
    lanes::LaneAssembler assembler;
    lanes::Sums device;  // what the kernel adds
    std::uint64_t at = 0;
    for (const std::uint64_t length : lengths) {
      const unsigned char* segment = data.data() + at;
      assembler.add(
          length,
          [&](std::uint64_t offset, std::uint64_t bytes, std::uint64_t first_lane) {
            EXPECT_EQ(bytes % 8, 0u);
            EXPECT_LE(offset + bytes, length);
            for (std::uint64_t k = 0; k < bytes / 8; ++k) {
              unsigned long long v = 0;
              std::memcpy(&v, segment + offset + 8 * k, 8);
              device.add(v, first_lane + k);
            }
          },
          [&](std::uint64_t offset, std::uint64_t bytes, unsigned char* out) {
            EXPECT_GT(bytes, 0u);  // no empty reads (each is a copy from the device and a sync)
            EXPECT_LT(bytes, 8u);
            EXPECT_LE(offset + bytes, length);
            std::memcpy(out, segment + offset, bytes);
          });
      at += length;
    }
    EXPECT_EQ(assembler.bytes(), data.size());
    return assembler.finish(device);
  };
  std::mt19937_64 rng(5);
  for (const std::uint64_t n : {0, 1, 7, 8, 9, 15, 64, 1001, 4099}) {
    std::vector<unsigned char> data(n);
    for (auto& b : data) b = static_cast<unsigned char>(rng());
    const std::uint64_t want = reference(data);
    std::vector<std::vector<std::uint64_t>> splits = {{n}};
    for (const std::uint64_t step : {1, 3, 6, 8, 13, 24}) {
      std::vector<std::uint64_t> lengths;
      for (std::uint64_t at = 0; at < n; at += step) lengths.push_back(std::min(step, n - at));
      splits.push_back(lengths);
    }
    for (int r = 0; r < 20; ++r) {  // random lengths, empty segments among them
      std::vector<std::uint64_t> lengths;
      for (std::uint64_t at = 0; at < n;) {
        const std::uint64_t len = std::min<std::uint64_t>(rng() % 21, n - at);
        lengths.push_back(len);
        at += len;
      }
      splits.push_back(lengths);
    }
    for (const auto& lengths : splits) EXPECT_EQ(in_segments(data, lengths), want) << n << " bytes, " << lengths.size() << " segments";
    if (n >= 2) {  // and the digest sees a changed byte
      std::vector<unsigned char> changed = data;
      changed[0] = static_cast<unsigned char>(data[0] + 1);
      EXPECT_NE(in_segments(changed, {1, n - 1}), want) << n;
    }
  }
}

}  // namespace
}  // namespace graphcheck::kernels
