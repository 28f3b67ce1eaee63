// Quantized refit (bug class 4): the poison patterns and survivor counting, the staging and
// fold-back helpers the quantized fixtures use, bucketed refits, expect_error, and the poison
// probe's evidence on the fixtures.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "counting_allocator.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/engine/driver.h"
#include "graphcheck/probe.h"
#include "graphcheck_test_config.h"
#include "poison.h"
#include "quant/staging.h"
#include "torch_compat.h"

namespace graphcheck {
namespace {

// ---- poison patterns --------------------------------------------------------------------------

TEST(Poison, PatternIsNanInEveryFloatingDtype) {
  std::vector<c10::ScalarType> dtypes = {
      torch::kFloat64, torch::kFloat32, torch::kFloat16, torch::kBFloat16,
      c10::ScalarType::Float8_e4m3fn, c10::ScalarType::Float8_e5m2,
      c10::ScalarType::Float8_e4m3fnuz, c10::ScalarType::Float8_e5m2fnuz};
#if GRAPHCHECK_HAS_FLOAT8_E8M0
  dtypes.push_back(c10::ScalarType::Float8_e8m0fnu);
#endif
  for (auto dtype : dtypes) {
    torch::Tensor t = torch::zeros({3, 5}, torch::TensorOptions().dtype(dtype));
    fill_poison(t);
    EXPECT_TRUE(poison_is_nan(dtype)) << dtype;
    EXPECT_TRUE(t.to(torch::kFloat32).isnan().all().item<bool>()) << dtype;
    const Survivors s = count_survivors(t, torch::Tensor());
    EXPECT_EQ(s.count, 15) << dtype;
    EXPECT_EQ(s.first, 0) << dtype;
  }
  EXPECT_EQ(poison_byte(c10::ScalarType::Float8_e4m3fnuz), 0x80);
  EXPECT_EQ(poison_byte(torch::kUInt8), 0xFF);
  EXPECT_FALSE(poison_is_nan(torch::kUInt8));
}

TEST(Poison, FillsNonContiguousTensorsInPlace) {
  torch::Tensor base = torch::zeros({4, 6});
  torch::Tensor view = base.t();  // non-contiguous, same storage
  fill_poison(view);
  EXPECT_TRUE(base.isnan().all().item<bool>());
  torch::Tensor strided = torch::zeros({8});
  fill_poison(strided.slice(0, 0, 8, 2));
  EXPECT_EQ(strided.isnan().sum().item<std::int64_t>(), 4);
  EXPECT_FALSE(strided[1].isnan().item<bool>());
  // The pattern's bytes exactly, in the view's elements and nowhere else: the middle two of a
  // stack of four bfloat16 matrices seen through transpose(1, 2) (dense, permuted, not at the
  // storage's start), and a column slice of a matrix (rows with gaps).
  torch::Tensor stack = torch::zeros({4, 6, 32}, torch::kBFloat16);
  fill_poison(stack.narrow(0, 1, 2).transpose(1, 2));
  const torch::Tensor bits = stack.view(torch::kInt16);
  EXPECT_TRUE(bits.narrow(0, 1, 2).eq(-1).all().item<bool>());  // 0xFFFF
  EXPECT_TRUE(bits.narrow(0, 0, 1).eq(0).all().item<bool>());
  EXPECT_TRUE(bits.narrow(0, 3, 1).eq(0).all().item<bool>());
  torch::Tensor matrix = torch::zeros({5, 12});
  fill_poison(matrix.narrow(1, 2, 7));
  EXPECT_TRUE(matrix.narrow(1, 2, 7).view(torch::kInt32).eq(-1).all().item<bool>());
  EXPECT_EQ(matrix.isnan().sum().item<std::int64_t>(), 35);
  // A conjugate view (torch views none as bytes): poisoned through a copy, as before (from a
  // review: the byte view threw).
  torch::Tensor complex = torch::zeros({4, 8}, torch::kComplexFloat);
  EXPECT_NO_THROW(fill_poison(complex.narrow(1, 0, 4).conj()));
  EXPECT_TRUE(torch::view_as_real(complex.narrow(1, 0, 4)).isnan().all().item<bool>());
  EXPECT_FALSE(torch::view_as_real(complex.narrow(1, 4, 4)).isnan().any().item<bool>());
}

TEST(Poison, CountsSurvivorsAndTheFirstOffset) {
  torch::Tensor t = torch::zeros({10});
  fill_poison(t.slice(0, 3, 6));
  Survivors s = count_survivors(t, torch::Tensor());
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.first, 3);
  EXPECT_EQ(s.elements, 10);
  // A computed NaN (not the pattern's bytes) is not a survivor.
  torch::Tensor computed = torch::full({4}, std::nan(""));
  EXPECT_EQ(count_survivors(computed, torch::Tensor()).count, 0);
}

// A transposed tensor scanned against an expected value of the same strides (model B's tensor
// after the same PWAL) or none is counted in storage order (Note [Scans in storage order]); the
// count, and the first survivor's logical index, are those of the contiguous copies. So are the
// scans the fast path leaves to the copies: an expected value in another layout, a stack with
// a gap (not dense).
TEST(Poison, TransposedTensorsCountAsTheirContiguousCopies) {
  torch::manual_seed(7);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kUInt8}) {
    const torch::Tensor storage = torch::randint(0, 200, {48, 96}, torch::kInt64).to(dtype);
    torch::Tensor t = storage.clone().t();  // [96, 48], strides (1, 96)
    const torch::Tensor expected = storage.clone().t();
    const torch::Tensor expected_row_major = expected.contiguous();
    auto want = [&](const torch::Tensor& e) {
      const torch::Tensor ec = e.defined() ? e.contiguous() : e;
      return count_survivors(t.contiguous(), ec);
    };
    auto same = [&](const torch::Tensor& e, const std::string& what) {
      const Survivors got = count_survivors(t, e), ref = want(e);
      EXPECT_EQ(got.count, ref.count) << what << " " << dtype;
      EXPECT_EQ(got.first, ref.first) << what << " " << dtype;
      return got;
    };
    EXPECT_EQ(same(expected, "clean, same strides").count, 0);
    // Poison at logical [5, 7], [5, 40], [60, 2] and [90, 1]; the expected value holds the
    // pattern itself at [5, 7] (no evidence there). The first survivor in logical order is
    // [5, 40], the first in storage order [90, 1]; elements paired by storage order across two
    // layouts would count [5, 7].
    for (const auto& [r, c] : {std::pair{5, 7}, std::pair{5, 40}, std::pair{60, 2}, std::pair{90, 1}}) {
      fill_poison(t[r][c]);
    }
    torch::Tensor expected_own = expected.t().clone().t();
    fill_poison(expected_own[5][7]);
    const torch::Tensor expected_other = expected_own.contiguous();
    EXPECT_EQ(same(expected_own, "same strides").count, 3);
    EXPECT_EQ(same(expected_own, "same strides").first, 5 * 48 + 40);
    EXPECT_EQ(same(expected_other, "expected in another layout").count, 3);
    same(expected_row_major, "expected in another layout, no pattern");
    {
      // One survivor, at [5, 40] (storage index 5 + 96 * 40), and an expected value in row-major
      // layout that holds the pattern at the element of that storage index: paired by storage
      // order, the two would cancel to a count of 0.
      torch::Tensor lone = storage.clone().t();
      fill_poison(lone[5][40]);
      torch::Tensor other = storage.t().contiguous();
      const std::int64_t k = 5 + 96 * 40;
      fill_poison(other[k / 48][k % 48]);
      const Survivors got = count_survivors(lone, other);
      EXPECT_EQ(got.count, 1) << dtype;
      EXPECT_EQ(got.first, 5 * 48 + 40) << dtype;
    }
    same(torch::Tensor(), "no expected value");
    fill_poison(t);
    same(torch::Tensor(), "all poisoned, no expected value");
    EXPECT_EQ(count_survivors(t, torch::Tensor()).count, t.numel());
  }
  // Not dense: every other matrix of a stack, transposed.
  torch::Tensor stack = torch::zeros({4, 8, 16});
  const torch::Tensor every_other = stack.slice(0, 0, 4, 2).transpose(1, 2);
  fill_poison(every_other[1][3][2]);
  const Survivors s = count_survivors(every_other, torch::Tensor());
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.first, 1 * 128 + 3 * 8 + 2);
}

// Scans that need logical order (a survivor's index, an expected value in another layout) read
// rows where they lie, and copy anything else a piece at a time (Note [Scans in logical order]):
// the count, the first survivor and both masks are those of the contiguous copies, for shards of
// dim 1, transposed tensors against their checkpoint record (and the reverse), views of several
// pieces and of rows larger than a piece, expanded views, and the sentinel rule without an
// expected value.
TEST(Poison, ScansInLogicalOrderCountAsTheContiguousCopies) {
  torch::manual_seed(11);
  struct Case {
    std::string what;
    torch::Tensor t, expected;
    torch::Tensor base;  // what t views (poisoned whole for the sentinel rule)
    std::vector<std::vector<std::int64_t>> poisoned;  // indices of t filled with the poison
    std::vector<std::int64_t> expected_pattern;        // an index of expected that holds it itself
  };
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kUInt8}) {
    const auto values = [&](std::vector<std::int64_t> sizes) {
      return torch::randint(0, 200, sizes, torch::kInt64).to(dtype);
    };
    std::vector<Case> cases;
    {
      // A shard of dim 1 of a fused tensor: rows of 128 elements 384 apart, against its record;
      // 63 rows: the last of them read in a group of three, not four.
      const torch::Tensor fused = values({63, 384});
      cases.push_back({"dim-1 shard", fused.narrow(1, 128, 128), fused.narrow(1, 128, 128).contiguous(), fused,
                       {{0, 0}, {3, 127}, {40, 5}, {62, 127}}, {40, 5}});
    }
    {
      // Rows of two bands and more, read four rows side by side a band at a time: the first
      // survivor in logical order ([0, 200], in row 0's second band) is found after [1, 5].
      const torch::Tensor fused = values({8, 768});
      cases.push_back({"dim-1 shard, rows of several bands", fused.narrow(1, 256, 256),
                       fused.narrow(1, 256, 256).contiguous(), fused, {{0, 200}, {1, 5}, {7, 255}}, {7, 255}});
    }
    {
      // The same of a stack (an MoE layer's experts): rows in the order of two outer dims.
      const torch::Tensor fused = values({4, 6, 384});
      cases.push_back({"dim-2 shard of a stack", fused.narrow(2, 128, 128), fused.narrow(2, 128, 128).contiguous(),
                       fused, {{1, 4, 7}, {3, 0, 127}, {2, 5, 0}}, {2, 5, 0}});
    }
    {
      const torch::Tensor w = values({48, 96});
      cases.push_back({"transposed, record row-major", w.t(), w.t().contiguous(), w, {{5, 40}, {60, 2}, {90, 1}}, {60, 2}});
      // Rows of 128 elements: long enough to be read where they lie, were the record's too.
      const torch::Tensor v = values({128, 96});
      const torch::Tensor row_major = v.t().contiguous();
      cases.push_back({"row-major, record transposed", row_major, v.clone().t(), row_major, {{5, 40}, {95, 127}}, {5, 40}});
    }
    {
      // Rows of dim 0 larger than a piece, each taken in pieces: [3, 700, 400] float32 is 1.1 MB
      // per index of dim 0.
      const torch::Tensor w = values({3, 400, 700});
      cases.push_back({"permuted, several pieces", w.permute({0, 2, 1}), w.permute({0, 2, 1}).contiguous(), w,
                       {{1, 690, 399}, {2, 0, 0}, {2, 699, 399}}, {2, 0, 0}});
    }
    {
      const torch::Tensor row = values({1, 300});
      cases.push_back({"expanded", row.expand({4, 300}), row.expand({4, 300}).contiguous(), row, {{0, 17}}, {}});
    }
    for (Case& c : cases) {
      const torch::Tensor& t = c.t;
      for (const auto& index : c.poisoned) {
        torch::Tensor at = t;
        for (const std::int64_t i : index) at = at.select(0, i);
        fill_poison(at);
      }
      if (!c.expected_pattern.empty()) {
        torch::Tensor at = c.expected;
        for (const std::int64_t i : c.expected_pattern) at = at.select(0, i);
        fill_poison(at);
      }
      const torch::Tensor tc = t.contiguous(), ec = c.expected.contiguous();
      for (const bool with_expected : {true, false}) {
        const torch::Tensor e = with_expected ? c.expected : torch::Tensor();
        const torch::Tensor e_ref = with_expected ? ec : torch::Tensor();
        const std::string what = fmt::format("{}, {}, {}", c.what, c10::toString(dtype), with_expected ? "expected" : "no expected");
        const Survivors got = count_survivors(t, e), want = count_survivors(tc, e_ref);
        EXPECT_EQ(got.count, want.count) << what;
        EXPECT_EQ(got.first, want.first) << what;
        EXPECT_TRUE(survivor_mask(t, e).equal(survivor_mask(tc, e_ref))) << what;
        if (with_expected) {
          EXPECT_GT(want.count, 0) << what;  // the case has survivors to find
        }
        if (!with_expected && dtype == torch::kUInt8) {
          // A sentinel without a reference, kept in part: no evidence, in the count or the mask.
          EXPECT_EQ(got.count, 0) << what;
          EXPECT_FALSE(survivor_mask(t, e).any().item<bool>()) << what;
        }
      }
      EXPECT_TRUE(pattern_mask(t).equal(pattern_mask(tc))) << c.what << ", " << dtype;
      // Every element poisoned, no expected value: the sentinel rule counts every one.
      fill_poison(c.base);
      EXPECT_EQ(count_survivors(t, torch::Tensor()).count, t.numel()) << c.what << ", " << dtype;
      EXPECT_EQ(count_survivors(t, torch::Tensor()).first, 0) << c.what << ", " << dtype;
      EXPECT_TRUE(survivor_mask(t, torch::Tensor()).all().item<bool>()) << c.what << ", " << dtype;
    }
  }
}

// A conjugate view taken in pieces counts as its contiguous copy (which resolves the conjugation)
// in every piece, the contiguous ones included: rows of 400,000 bytes, two to a piece, the last
// piece one row and contiguous.
TEST(Poison, ConjugateViewsCountAsTheirContiguousCopies) {
  torch::Tensor base = torch::empty({3, 50001}, torch::kComplexFloat);
  std::memset(base.data_ptr(), 0xFF, base.nbytes());  // the pattern in every byte, as stored
  const torch::Tensor t = base.conj().narrow(1, 0, 50000);
  const torch::Tensor e = torch::zeros({3, 50000}, torch::kComplexFloat);
  const Survivors got = count_survivors(t, e), want = count_survivors(t.contiguous(), e);
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.first, want.first);
  EXPECT_TRUE(survivor_mask(t, e).equal(survivor_mask(t.contiguous(), e)));
  // The same of the expected value: a tensor that holds the pattern against a conjugate view in
  // pieces, which holds it as stored and not once resolved.
  torch::Tensor poisoned = torch::empty({3, 50000}, torch::kComplexFloat);
  std::memset(poisoned.data_ptr(), 0xFF, poisoned.nbytes());
  const Survivors reverse = count_survivors(poisoned, t), reverse_want = count_survivors(poisoned, t.contiguous());
  EXPECT_EQ(reverse.count, reverse_want.count);
  EXPECT_EQ(reverse.first, reverse_want.first);
}

// A scan of a transposed tensor against its checkpoint record (and of a row-major one against a
// transposed record), and of a shard of dim 1 against its record, holds at most two pieces of
// torch memory, not copies of the tensor's size; a clean one (nothing holds the pattern: Note
// [Scans in storage order]) holds none.
TEST(Poison, ScansInLogicalOrderCopyNoTensorWhole) {
  auto& counter = CountingCpuAllocator::instance();
  for (const bool clean : {true, false}) {
    const torch::Tensor w = torch::rand({4096, 1024});
    const torch::Tensor v = torch::rand({4096, 1024});
    const torch::Tensor fused = torch::rand({4096, 3072});
    const std::vector<std::pair<torch::Tensor, torch::Tensor>> scans = {
        {w.t(), w.t().contiguous()},
        {v.t().contiguous(), v.t()},
        {fused.narrow(1, 1024, 1024), fused.narrow(1, 1024, 1024).contiguous()},
    };
    for (const auto& [t, expected] : scans) {
      if (!clean) fill_poison(t[700][300]);
      counter.install();
      const std::int64_t before = counter.live_bytes();
      counter.reset_peak();
      const Survivors got = count_survivors(t, expected);
      const std::int64_t peak = counter.peak_bytes() - before;
      counter.uninstall();
      const std::string what = fmt::format("{} {}{}", fmt::join(t.sizes(), "x"), fmt::join(t.strides(), ","),
                                           clean ? ", clean" : ", one survivor");
      EXPECT_EQ(got.count, clean ? 0 : 1) << what;
      EXPECT_EQ(got.first, clean ? -1 : 700 * t.size(1) + 300) << what;
      EXPECT_LE(peak, clean ? 0 : (2 << 20) + (64 << 10)) << what << ": " << t.nbytes() << " bytes";
    }
  }
}

TEST(Poison, SentinelWithoutNanNeedsTheExpectedValue) {
  // uint8 payload: 0xFF is a legitimate byte (two E2M1 -6.0 values).
  torch::Tensor expected = torch::tensor({1, 255, 3, 255, 5}, torch::kUInt8);
  torch::Tensor loaded = expected.clone();
  EXPECT_EQ(count_survivors(loaded, expected).count, 0);  // legitimate 0xFF bytes do not count
  loaded[2] = 255;                                          // one element the load missed
  Survivors s = count_survivors(loaded, expected);
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.first, 2);
  // Without an expected value: only a tensor that kept the sentinel everywhere counts.
  EXPECT_EQ(count_survivors(loaded, torch::Tensor()).count, 0);
  torch::Tensor untouched = torch::zeros({6}, torch::kUInt8);
  fill_poison(untouched);
  EXPECT_EQ(count_survivors(untouched, torch::Tensor()).count, 6);
  // An expected value of another shape is no reference.
  EXPECT_EQ(count_survivors(untouched, torch::zeros({3}, torch::kUInt8)).count, 6);
}

TEST(Poison, FillsAWholeStorage) {
  torch::Tensor t = torch::zeros({2, 3}, torch::kFloat16);
  fill_storage(t.storage(), 0xFF);
  EXPECT_TRUE(t.isnan().all().item<bool>());
}

// ---- staging and fold-back --------------------------------------------------------------------

class TestLayer : public fixtures::quant::QuantModule {
 public:
  explicit TestLayer(TensorAttributes& attributes) : QuantModule("blocks.3") {
    weight = register_parameter("weight", torch::arange(6, torch::kFloat32).reshape({2, 3}), false);
    scale = register_parameter("scale", torch::zeros({3}, torch::kUInt8), false);
    attributes.set(weight, {0.5, true, fixtures::quant::bound_loader(weight, "blocks.3.weight")});
  }
  // The helpers are driven directly in these tests.
  void stage_for_refit(TensorAttributes&) override {}
  void process_weights_after_loading(TensorAttributes&) override {}
  torch::Tensor weight, scale;
};

TEST(Staging, ReusesTheLiveStorageOnlyWhenTheLayoutMatches) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "weight", {2, 3}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_TRUE(layer.staging());
  torch::Tensor staged_weight = layer.registered("weight");
  torch::Tensor staged_scale = layer.registered("scale");
  EXPECT_FALSE(staged_weight.is_same(layer.weight));              // a new parameter object
  EXPECT_EQ(staged_weight.data_ptr(), layer.weight.data_ptr());   // over the live storage
  EXPECT_NE(staged_scale.data_ptr(), layer.scale.data_ptr());     // a new buffer, zero-filled
  EXPECT_EQ(staged_scale.sizes(), (std::vector<std::int64_t>{3, 1}));
  EXPECT_TRUE(staged_scale.eq(0).all().item<bool>());
  // The staged parameter gets the live one's data attributes and a loader bound to itself.
  const TensorAttrs* attrs = attributes.find(staged_weight);
  ASSERT_NE(attrs, nullptr);
  EXPECT_EQ(attrs->dummy_weight_value, 0.5);
  torch::Tensor dummy;
  attrs->weight_loader(dummy, torch::full({2, 3}, 7.0f));
  EXPECT_TRUE(layer.weight.eq(7).all().item<bool>());

  // A new weight buffer, when the layout differs, starts as poison.
  layer.stage(attributes, "weight", {3, 2}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  EXPECT_TRUE(layer.registered("weight").isnan().all().item<bool>());
}

TEST(Staging, FoldBackCopiesIntoTheLiveStorageAndRegistersItAgain) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  const void* live_address = layer.scale.data_ptr();
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  torch::Tensor staged = layer.registered("scale");
  layer.fold_back(attributes, {{"scale", torch::tensor({120, 127, 130}, torch::kUInt8)}});
  EXPECT_TRUE(layer.registered("scale").is_same(layer.scale));
  EXPECT_EQ(layer.scale.data_ptr(), live_address);
  EXPECT_EQ(layer.scale[2].item<int>(), 130);
  EXPECT_EQ(attributes.find(staged), nullptr);  // the staging tensor's attributes are dropped
  EXPECT_FALSE(layer.staging());
  layer.check_no_leftovers();
}

TEST(Staging, FoldBackShapeOrDtypeMismatchIsAnErrorNamingTheTensor) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  try {
    layer.fold_back(attributes, {{"scale", torch::zeros({4}, torch::kUInt8)}});
    ADD_FAILURE() << "a shape mismatch folded back";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("refit of 'blocks.3.scale'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4] Byte"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3] Byte"), std::string::npos) << e.what();
  }
  try {
    layer.fold_back(attributes, {{"scale", torch::zeros({3}, torch::kInt32)}});
    ADD_FAILURE() << "a dtype mismatch folded back";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'blocks.3.scale'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Int"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(layer.scale.eq(0).all().item<bool>());  // the live tensor is untouched
}

TEST(Staging, FoldBackChecksEveryTensorBeforeCopyingAny) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "weight", {3, 2}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_THROW(layer.fold_back(attributes, {{"weight", torch::full({2, 3}, 9.0f)},
                                            {"scale", torch::zeros({4}, torch::kUInt8)}}),
               std::runtime_error);
  EXPECT_TRUE(layer.weight.eq(torch::arange(6, torch::kFloat32).reshape({2, 3})).all().item<bool>());
}

class SquareLayer : public fixtures::quant::QuantModule {
 public:
  SquareLayer() : QuantModule("sq") {
    weight = register_parameter("weight", torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2}), false);
  }
  void stage_for_refit(TensorAttributes&) override {}
  void process_weights_after_loading(TensorAttributes&) override {}
  torch::Tensor weight;
};

TEST(Staging, FoldBackCopiesAViewOfTheLiveStorageWithOtherStrides) {
  TensorAttributes attributes;
  SquareLayer layer;
  layer.stage(attributes, "weight", {2, 2}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  torch::Tensor transposed = layer.registered("weight").t();  // same address, other strides
  ASSERT_EQ(transposed.data_ptr(), layer.weight.data_ptr());
  layer.fold_back(attributes, {{"weight", transposed}});
  EXPECT_TRUE(layer.weight.equal(torch::tensor({1.0f, 3.0f, 2.0f, 4.0f}).reshape({2, 2})));
}

TEST(Staging, StreamedNamesDecideBetweenUnstagingAndProcessing) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "weight", {2, 3}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_EQ(layer.streamed(), fixtures::quant::QuantModule::Streamed::none);
  layer.note_streamed("scale");
  EXPECT_EQ(layer.streamed(), fixtures::quant::QuantModule::Streamed::some);
  EXPECT_EQ(layer.partially_streamed(), "streamed blocks.3.scale but not blocks.3.weight");
  try {
    fixtures::quant::check_streamed_whole({&layer});
    ADD_FAILURE() << "a half-streamed layer was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("refit streamed blocks.3.scale but not blocks.3.weight"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no layer was folded back"), std::string::npos) << e.what();
  }
  layer.note_streamed("weight");
  EXPECT_EQ(layer.streamed(), fixtures::quant::QuantModule::Streamed::all);
  fixtures::quant::check_streamed_whole({&layer});  // whole: accepted
  layer.unstage(attributes);
  EXPECT_FALSE(layer.staging());
  EXPECT_TRUE(layer.registered("scale").is_same(layer.scale));
  EXPECT_TRUE(layer.registered("weight").is_same(layer.weight));
  // The next refit starts from nothing streamed.
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_EQ(layer.streamed(), fixtures::quant::QuantModule::Streamed::none);
}

TEST(Staging, StagingTwiceKeepsTheLiveTensorOfTheFirstStage) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  // A refit whose PWAL never ran, then the next refit stages again.
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  torch::Tensor first_staging = layer.registered("scale");
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_FALSE(layer.registered("scale").is_same(first_staging));
  EXPECT_EQ(attributes.find(first_staging), nullptr);
  layer.fold_back(attributes, {{"scale", torch::tensor({1, 2, 3}, torch::kUInt8)}});
  EXPECT_TRUE(layer.registered("scale").is_same(layer.scale));
  EXPECT_EQ(layer.scale[2].item<int>(), 3);
}

TEST(Staging, FoldingBackOneNameTwiceIsRejectedBeforeAnyCopy) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  EXPECT_THROW(layer.fold_back(attributes, {{"scale", torch::ones({3}, torch::kUInt8)},
                                            {"scale", torch::ones({3}, torch::kUInt8)}}),
               c10::Error);
  EXPECT_TRUE(layer.scale.eq(0).all().item<bool>());
  EXPECT_TRUE(layer.staging());
}

TEST(Staging, LeftoverStagedParametersAreAnErrorNamingThem) {
  TensorAttributes attributes;
  TestLayer layer(attributes);
  layer.stage(attributes, "weight", {2, 3}, torch::kFloat32, fixtures::quant::StageFill::poison, false);
  layer.stage(attributes, "scale", {3, 1}, torch::kFloat32, fixtures::quant::StageFill::zeros, false);
  layer.fold_back(attributes, {{"weight", layer.registered("weight")}});
  try {
    layer.check_no_leftovers();
    ADD_FAILURE() << "a leftover staged parameter went unnoticed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.3.scale"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("blocks.3.weight"), std::string::npos) << e.what();
  }
}

TEST(Staging, ABoundLoaderWritesIntoTheTensorItWasBoundTo) {
  torch::Tensor a = torch::zeros({2});
  torch::Tensor b = torch::zeros({2});
  WeightLoader loader = fixtures::quant::bound_loader(a, "x.a");
  loader(b, torch::ones({2}));  // attached to b, still writes a: the seed's stale binding
  EXPECT_TRUE(a.eq(1).all().item<bool>());
  EXPECT_TRUE(b.eq(0).all().item<bool>());
  EXPECT_THROW(loader(a, torch::ones({3})), CheckpointMismatch);
}

// ---- driver: stage, buckets, expect_error -----------------------------------------------------

class LoadLog final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "load_log"; }
  void on_refit_begin(RunContext&, const PhaseEvent& e) override { log.push_back(fmt::format("refit_begin {}", e.cycle)); }
  void on_load_begin(RunContext&, const LoadEvent& e) override {
    log.push_back(fmt::format("load_begin {} bucket={}", e.cycle, e.bucket));
  }
  void on_load_end(RunContext&, const LoadEvent& e) override {
    std::vector<std::string> names;
    for (const auto& t : e.streamed) names.push_back(t.name);
    log.push_back(fmt::format("load_end {} bucket={} streamed={}", e.cycle, e.bucket, fmt::join(names, ",")));
  }
  void on_pwal_begin(RunContext&, const PhaseEvent& e) override { log.push_back(fmt::format("pwal {}", e.cycle)); }
  void on_refit_end(RunContext&, const PhaseEvent& e) override { log.push_back(fmt::format("refit_end {}", e.cycle)); }
  void on_hook(RunContext&, const HookEvent& e) override {
    if (e.hook.rfind("stage", 0) == 0) log.push_back(fmt::format("hook {} {} in {}", e.module_path, e.hook, to_string(e.phase)));
  }
  std::vector<std::string> log;
};

Scenario fp8_scenario(std::vector<std::string> checks) {
  Scenario s;
  s.name = "fp8";
  s.file = "fp8.yaml";
  s.fixture = "fp8_linear";
  s.config.set("layers", std::int64_t{2});
  s.config.set("hidden", std::int64_t{192});
  s.config.set("block", std::int64_t{128});
  s.batch_sizes = {2};
  RefitSpec refit;
  refit.seed = 2;
  refit.buckets = {{"first", {"layers.0."}}, {"second", {"layers.1.proj."}}};
  s.cycles = {refit};
  s.checks = std::move(checks);
  return s;
}

RunOptions options(std::vector<Probe*> probes = {}, std::set<std::string> mutations = {}) {
  RunOptions o;
  o.work_dir = std::string(GRAPHCHECK_TEST_BINARY_DIR) + "/quantized_refit_work";
  o.extra_probes = std::move(probes);
  o.mutations = std::move(mutations);
  return o;
}

TEST(QuantizedRefit, StagesOnceThenLoadsEachBucketThenOnePwal) {
  LoadLog log;
  ScenarioRecord r = run_scenario(fp8_scenario({"replay_diff", "address"}), options({&log}));
  ASSERT_EQ(r.status, Status::passed) << r.reason;
  std::vector<std::string> refit(std::find(log.log.begin(), log.log.end(), "refit_begin 1"), log.log.end());
  // Streamed in the checkpoint file's order (safetensors keeps larger alignments first).
  EXPECT_EQ(refit, (std::vector<std::string>{
                       "refit_begin 1",
                       "hook layers.0.proj stage_fp8_params_for_loading in refit",
                       "hook layers.1.proj stage_fp8_params_for_loading in refit",
                       "load_begin 1 bucket=first",
                       "load_end 1 bucket=first streamed=layers.0.norm,layers.0.proj.weight_scale_inv,layers.0.proj.weight",
                       "load_begin 1 bucket=second",
                       "load_end 1 bucket=second streamed=layers.1.proj.weight_scale_inv,layers.1.proj.weight",
                       "pwal 1",
                       "refit_end 1"}));
}

TEST(QuantizedRefit, LiveTensorsHoldTheKernelLayoutAfterPwal) {
  ModelConfig config;
  config.set("hidden", std::int64_t{192});
  auto model = ModelRegistry::get().find("fp8_linear")->factory(config);
  auto weights = model->synthesize_checkpoint(5);
  for (auto& t : weights) {
    if (t.name == "layers.0.proj.weight_scale_inv") t.tensor[0][1] *= 16;  // still a valid checkpoint
  }
  TensorListWeightStream stream(weights, "test");
  model->load_weights(stream);
  model->process_weights_after_loading();
  std::map<std::string, torch::Tensor> live;
  for (auto& t : live_tensors(*model)) live[t.name] = t.tensor;
  EXPECT_EQ(live.at("layers.0.proj.weight").scalar_type(), c10::ScalarType::Float8_e4m3fn);
  EXPECT_EQ(live.at("layers.0.proj.weight_scale_inv").scalar_type(), torch::kUInt8);  // UE8M0
  // UE8M0 exponents of the checkpoint scales, K-block-major (transposed).
  torch::Tensor ckpt_scale;
  for (auto& t : weights) {
    if (t.name == "layers.0.proj.weight_scale_inv") ckpt_scale = t.tensor;
  }
  torch::Tensor ue8m0 = (torch::ceil(torch::log2(ckpt_scale)) + 127).to(torch::kUInt8);
  ASSERT_FALSE(ue8m0.equal(ue8m0.t()));  // asymmetric, so the layout is visible
  EXPECT_TRUE(live.at("layers.0.proj.weight_scale_inv").equal(ue8m0.t().contiguous()));
}

TEST(QuantizedRefit, Mxfp4DeepGemmScalesAreKBlockMajor) {
  ModelConfig config;
  config.set("layers", std::int64_t{1});
  config.set("hidden", std::int64_t{64});
  config.set("intermediate", std::int64_t{32});
  config.set("experts", std::int64_t{2});
  auto model = ModelRegistry::get().find("mxfp4_moe")->factory(config);
  auto weights = model->synthesize_checkpoint(5);
  std::map<std::string, torch::Tensor> ckpt;
  for (auto& t : weights) ckpt[t.name] = t.tensor;
  EXPECT_EQ(ckpt.at("layers.0.experts.w13_weight_scale").sizes(), (std::vector<std::int64_t>{2, 64, 2}));
  TensorListWeightStream stream(weights, "test");
  model->load_weights(stream);
  model->process_weights_after_loading();
  std::map<std::string, torch::Tensor> live;
  for (auto& t : live_tensors(*model)) live[t.name] = t.tensor;
  EXPECT_EQ(live.at("layers.0.experts.w13_weight_scale").sizes(), (std::vector<std::int64_t>{2, 2, 64}));
  EXPECT_EQ(live.at("layers.0.experts.w2_weight_scale").sizes(), (std::vector<std::int64_t>{2, 1, 64}));
  EXPECT_TRUE(live.at("layers.0.experts.w13_weight_scale")
                  .equal(ckpt.at("layers.0.experts.w13_weight_scale").transpose(1, 2).contiguous()));
}

Scenario triton_like(const std::string& backend) {
  Scenario s;
  s.name = "mxfp4";
  s.file = "mxfp4.yaml";
  s.fixture = "mxfp4_moe";
  s.config.set("layers", std::int64_t{2});
  s.config.set("hidden", std::int64_t{64});
  s.config.set("intermediate", std::int64_t{32});
  s.config.set("experts", std::int64_t{2});
  s.config.set("moe_backend", backend);
  s.batch_sizes = {2};
  s.cycles = {RefitSpec{2, {}, {}, "mxfp4.yaml:9:5"}};
  s.checks = {"replay_diff"};
  return s;
}

Scenario triton_scenario() {
  Scenario s;
  s.name = "triton";
  s.file = "triton.yaml";
  s.fixture = "mxfp4_moe";
  s.config.set("layers", std::int64_t{1});
  s.config.set("hidden", std::int64_t{64});
  s.config.set("intermediate", std::int64_t{32});
  s.config.set("experts", std::int64_t{2});
  s.config.set("moe_backend", std::string("triton"));
  s.batch_sizes = {2};
  s.cycles = {RefitSpec{2, {}, {}, "triton.yaml:9:5"}};
  s.checks = {"replay_diff"};
  return s;
}

TEST(QuantizedRefit, UnsupportedBackendFailsLoudlyNamingTheBackendToUse) {
  ScenarioRecord r = run_scenario(triton_scenario(), options());
  EXPECT_EQ(r.status, Status::error);
  EXPECT_NE(r.reason.find("'triton' backend re-lays out the expert weights"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("set moe_backend: deep_gemm"), std::string::npos) << r.reason;
}

TEST(QuantizedRefit, ExpectErrorPassesOnlyOnThatError) {
  Scenario s = triton_scenario();
  s.expect_error = "supported only with moe_backend: deep_gemm";
  s.expect_error_where = "triton.yaml:12:15";
  ScenarioRecord r = run_scenario(s, options());
  EXPECT_EQ(r.status, Status::passed) << r.reason;
  EXPECT_NE(r.reason.find("stopped as expected in phase refit (cycle 1)"), std::string::npos) << r.reason;

  // Another error: still an error, saying what was expected instead.
  s.expect_error = "some other message";
  r = run_scenario(s, options());
  EXPECT_EQ(r.status, Status::error);
  EXPECT_NE(r.reason.find("expects an error containing 'some other message' instead, triton.yaml:12:15"),
            std::string::npos) << r.reason;

  // The silent pre-fix path: no error, so the scenario fails with the driver's finding, and
  // replay_diff sees the wrong weights.
  s.expect_error = "supported only with moe_backend: deep_gemm";
  r = run_scenario(s, options({}, {"mxfp4.silent_unsupported_backend"}));
  EXPECT_EQ(r.status, Status::failed);
  std::set<std::string> probes = r.failed_probes();
  EXPECT_TRUE(probes.count("driver"));
  EXPECT_TRUE(probes.count("replay_diff"));
  bool said = false, localised = false;
  for (const auto& f : r.findings) {
    said |= f.probe == "driver" && f.message.find("but it completed") != std::string::npos;
    // replay_diff names the tensors A holds wrongly: the interleaved w13 got checkpoint rows.
    localised |= f.probe == "replay_diff" &&
                 f.message.find("live tensors of A that differ from B's: layers.0.experts.w13_weight (") !=
                     std::string::npos;
  }
  EXPECT_TRUE(said);
  EXPECT_TRUE(localised);
}

TEST(QuantizedRefit, APartialRefitLeavesUnstreamedLayersUntouched) {
  for (const char* fixture : {"fp8_linear", "mxfp4_moe"}) {
    Scenario s = fp8_scenario({"poison", "replay_diff", "address", "memory"});
    if (std::string(fixture) == "mxfp4_moe") {
      s = triton_like("deep_gemm");
      s.checks = {"poison", "replay_diff", "address", "memory"};
    }
    s.cycles = {RefitSpec{2, {"layers.1."}, {}, ""}, RefitSpec{3, {"layers.0."}, {}, ""}};
    s.poison.staged = {"layers.**"};
    s.poison.before_refit = true;
    ScenarioRecord r = run_scenario(s, options());
    EXPECT_EQ(r.status, Status::passed) << fixture << ": " << r.reason
                                        << (r.findings.empty() ? "" : r.findings[0].message);
    // Each refit poisoned the staged tensors of the layer it streams, and only those.
    std::vector<double> staged;
    for (const auto& m : r.measurements) {
      if (m.tag == "gc/poison/staged/tensors") staged.push_back(m.value);
    }
    const double per_layer = std::string(fixture) == "fp8_linear" ? 3 : 5;  // + norm / router
    EXPECT_EQ(staged, (std::vector<double>{per_layer, per_layer})) << fixture;
  }
}

TEST(QuantizedRefit, AHalfStreamedLayerIsAnErrorNamingWhatIsMissing) {
  Scenario s = fp8_scenario({"replay_diff"});
  s.cycles = {RefitSpec{2, {"layers.0.proj.weight_scale_inv"}, {}, ""}};
  ScenarioRecord r = run_scenario(s, options());
  ASSERT_EQ(r.status, Status::failed);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].probe, "driver");
  EXPECT_NE(r.findings[0].message.find(
                "refit streamed layers.0.proj.weight_scale_inv but not layers.0.proj.weight: a "
                "quantized layer is post-processed as a whole"),
            std::string::npos)
      << r.findings[0].message;
}

// ---- the poison probe on the fixtures ---------------------------------------------------------

std::map<std::string, std::string> evidence_of(const Finding& f) {
  return {f.evidence.begin(), f.evidence.end()};
}

TEST(PoisonProbe, StaleBoundLoaderLeavesTheStagedScaleFullOfPoison) {
  Scenario s = fp8_scenario({"poison", "replay_diff"});
  s.poison.staged = {"layers.*.proj.weight", "layers.*.proj.weight_scale_inv"};
  ScenarioRecord clean = run_scenario(s, options());
  ASSERT_EQ(clean.status, Status::passed) << clean.reason;

  ScenarioRecord r = run_scenario(s, options({}, {"fp8.stale_bound_loader"}));
  ASSERT_EQ(r.status, Status::failed);
  std::map<std::string, Finding> staged;
  for (const auto& f : r.findings) {
    if (f.probe == "poison" && f.phase == "load") staged[f.subject] = f;
  }
  // Scales stay poisoned; weights survive by aliasing the live storage (no finding).
  ASSERT_EQ(staged.size(), 2u);
  for (const char* name : {"layers.0.proj.weight_scale_inv", "layers.1.proj.weight_scale_inv"}) {
    ASSERT_TRUE(staged.count(name)) << name;
    auto ev = evidence_of(staged[name]);
    EXPECT_EQ(ev["surviving_elements"], "4");
    EXPECT_EQ(ev["elements"], "4");
    EXPECT_EQ(ev["first_element"], "0");
    EXPECT_EQ(ev["poison"], "0xFF");
  }
  EXPECT_EQ(evidence_of(staged["layers.1.proj.weight_scale_inv"])["bucket"], "second");
}

TEST(PoisonProbe, RebindInsteadOfFoldPoisonsTheOrphansAndTheReplayTurnsNan) {
  Scenario s = fp8_scenario({"poison"});
  ScenarioRecord r = run_scenario(s, options({}, {"fp8.rebind_instead_of_fold"}));
  ASSERT_EQ(r.status, Status::failed);
  bool replay_nan = false;
  for (const auto& f : r.findings) {
    if (f.probe != "poison" || f.phase != "replay") continue;
    replay_nan = true;
    EXPECT_NE(f.message.find("'layers.0.proj.weight_scale_inv'"), std::string::npos) << f.message;
    EXPECT_EQ(evidence_of(f)["orphaned_storages_poisoned"], "4");
    EXPECT_EQ(evidence_of(f)["nan_elements"], "384");  // every element of the [2, 192] output
  }
  EXPECT_TRUE(replay_nan);
}

TEST(PoisonProbe, APatternMatchingNothingIsAFinding) {
  Scenario s = fp8_scenario({"poison"});
  s.poison.staged = {"layers.*.proj.weight_scale", "layers.*.proj.weight"};
  ScenarioRecord r = run_scenario(s, options());
  ASSERT_EQ(r.status, Status::failed);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].subject, "layers.*.proj.weight_scale");
  EXPECT_NE(r.findings[0].message.find("matches no tensor of the checkpoint layout"), std::string::npos);
}

// A model whose refits report the uint8 table loaded without writing it: the stale-table bug a
// byte sentinel must find (uint8 has no NaN).
class DropsTableOnRefit final : public LifecycleModel {
 public:
  explicit DropsTableOnRefit(const ModelConfig&) {
    m_table = m_root.register_parameter("table", torch::zeros({64}, torch::kUInt8), false);
    m_weight = m_root.register_parameter("weight", torch::zeros({64}), false);
  }
  torch::nn::Module& module() override { return m_root; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    std::set<std::string> names;
    torch::NoGradGuard no_grad;
    while (auto item = weights.next()) {
      if (item->name == "weight") m_weight.copy_(item->tensor);
      if (item->name == "table" && !m_loaded_once) m_table.copy_(item->tensor);
      names.insert(item->name);
    }
    m_loaded_once = true;
    return names;
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return x * m_weight + m_table.to(torch::kFloat32);
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 64}); }
  std::vector<NamedTensor> synthesize_checkpoint(std::uint64_t seed) override {
    // Every byte value, 0xFF included, so the sentinel must be told apart from real data.
    torch::Tensor table = (torch::arange(64, torch::kInt64) * 4 + static_cast<std::int64_t>(seed)).remainder(256);
    table[7] = 255;
    return {{"table", table.to(torch::kUInt8)}, {"weight", torch::full({64}, static_cast<float>(seed))}};
  }

 private:
  torch::nn::Module m_root;
  torch::Tensor m_table, m_weight;
  bool m_loaded_once = false;
};

GRAPHCHECK_REGISTER_MODEL("test_drops_table_on_refit", [](const ModelConfig& c) {
  return std::make_unique<DropsTableOnRefit>(c);
});

TEST(PoisonProbe, PoisonBeforeRefitFindsAByteTensorTheRefitNeverWrote) {
  Scenario s;
  s.name = "drops";
  s.file = "drops.yaml";
  s.fixture = "test_drops_table_on_refit";
  s.batch_sizes = {1};
  s.cycles = {RefitSpec{2, {}, {}, ""}};
  s.checks = {"poison"};
  s.poison.before_refit = true;
  ScenarioRecord r = run_scenario(s, options());
  ASSERT_EQ(r.status, Status::failed);
  const Finding* table = nullptr;
  for (const auto& f : r.findings) {
    if (f.subject == "table" && f.phase == "refit") table = &f;
  }
  ASSERT_NE(table, nullptr);
  auto ev = evidence_of(*table);
  // Model B (the same code, one load) holds the refit's table: every element but the one whose
  // true value is 0xFF counts.
  EXPECT_EQ(ev["surviving_elements"], "63");
  EXPECT_EQ(ev["first_element"], "0");
  EXPECT_EQ(ev["dtype"], "Byte");
  EXPECT_EQ(ev["counted"], "elements holding the poison where the expected value does not");
}

// A model whose output is NaN by its own arithmetic (0 * inf): not poison.
class NanByDesign final : public LifecycleModel {
 public:
  explicit NanByDesign(const ModelConfig&) { m_w = m_root.register_parameter("w", torch::ones({4}), false); }
  torch::nn::Module& module() override { return m_root; }
  std::set<std::string> load_weights(WeightStream& weights) override { return load_module_weights(*this, weights); }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    return x * m_w * torch::tensor({0.0f, 1.0f, 0.0f, 1.0f}) * std::numeric_limits<float>::infinity();
  }
  torch::Tensor make_input(std::int64_t b, std::uint64_t) override { return torch::ones({b, 4}); }

 private:
  torch::nn::Module m_root;
  torch::Tensor m_w;
};

GRAPHCHECK_REGISTER_MODEL("test_nan_by_design", [](const ModelConfig& c) {
  return std::make_unique<NanByDesign>(c);
});

TEST(PoisonProbe, NanTheModelComputesItselfIsNoFinding) {
  Scenario s;
  s.name = "nan";
  s.file = "nan.yaml";
  s.fixture = "test_nan_by_design";
  s.batch_sizes = {2};
  s.cycles = {RefitSpec{2, {}, {}, ""}};
  s.checks = {"poison", "replay_diff"};
  ScenarioRecord r = run_scenario(s, options());
  EXPECT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
}

// Note [Model B's outputs across passes] (engine/driver.cpp): the poison pass tells the model's
// own NaN from poison by model B's outputs, which the observe pass computed on the same inputs
// from the same checkpoints; it takes those instead of building B once more per cycle.
TEST(PoisonProbe, NanCheckTakesTheObservePassModelBOutputs) {
  Scenario s;
  s.name = "nan";
  s.file = "nan.yaml";
  s.fixture = "test_nan_by_design";
  s.batch_sizes = {2, 3};
  s.cycles = {RefitSpec{2, {}, {}, ""}, RefitSpec{3, {}, {}, ""}};
  s.checks = {"poison"};
  ScenarioRecord r = run_scenario(s, options());
  ASSERT_EQ(r.status, Status::passed) << (r.findings.empty() ? r.reason : r.findings[0].message);
  std::map<std::string, int> builds;  // pass -> model B builds
  for (const auto& span : r.spans) {
    if (span.phase == "model B") ++builds[span.pass];
  }
  EXPECT_EQ(builds["observe"], 3);  // one per cycle
  EXPECT_EQ(builds["poison"], 0);
  EXPECT_EQ(r.passes, (std::vector<std::string>{"observe", "poison"}));
}

TEST(PoisonProbe, PoisonBeforeRefitIsOverwrittenOnACleanRefit) {
  Scenario s = fp8_scenario({"poison"});
  s.poison.before_refit = true;
  ScenarioRecord r = run_scenario(s, options());
  ASSERT_EQ(r.status, Status::passed) << r.reason;
  double tensors = -1;
  for (const auto& m : r.measurements) {
    if (m.tag == "gc/poison/poisoned_before_refit/tensors") tensors = m.value;
  }
  EXPECT_EQ(tensors, 5);  // layers.0.{norm, proj.weight, proj.weight_scale_inv}, layers.1.proj.*
}

}  // namespace
}  // namespace graphcheck
