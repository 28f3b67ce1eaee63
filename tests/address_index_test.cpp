// The address-range resolver (DESIGN §2.3) and the replay tolerance (DESIGN §2.4).

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <fmt/format.h>

#include <cmath>

#include "address_index.h"
#include "tolerance.h"

namespace graphcheck {
namespace {

const void* at(const torch::Tensor& t, std::int64_t byte_offset) {
  return static_cast<const char*>(t.data_ptr()) + byte_offset;
}

TEST(AddressIndex, ExactRangeResolvesToTheTensorWhole) {
  torch::Tensor a = torch::zeros({4, 4}), b = torch::zeros({8});
  AddressIndex index({{"a", a}, {"b", b}});
  auto hit = index.resolve(a.data_ptr(), a.nbytes());
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "a");
  EXPECT_EQ(hit->offset, 0);
  EXPECT_TRUE(hit->whole);
  EXPECT_EQ(index.resolve(b.data_ptr(), b.nbytes())->name, "b");
}

TEST(AddressIndex, InteriorPointerResolvesWithItsOffset) {
  torch::Tensor a = torch::zeros({4, 4});
  AddressIndex index({{"a", a}});
  auto hit = index.resolve(at(a, 20), 0);  // a bare pointer, as a CUDA graph audit yields
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->name, "a");
  EXPECT_EQ(hit->offset, 20);
  EXPECT_FALSE(hit->whole);
  hit = index.resolve(at(a, 16), 16);  // row 1
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->offset, 16);
  EXPECT_FALSE(hit->whole);
}

TEST(AddressIndex, RangeRunningPastTheTensorDoesNotResolve) {
  torch::Tensor a = torch::zeros({4});
  AddressIndex index({{"a", a}});
  EXPECT_FALSE(index.resolve(at(a, 8), 16));
  EXPECT_FALSE(index.resolve(at(a, 16), 0)) << "one past the end is outside";
}

TEST(AddressIndex, UnresolvedAddressGivesNothing) {
  torch::Tensor a = torch::zeros({4}), elsewhere = torch::zeros({4});
  AddressIndex index({{"a", a}});
  EXPECT_FALSE(index.resolve(elsewhere.data_ptr(), elsewhere.nbytes()));
  EXPECT_FALSE(index.resolve(nullptr, 0));
  EXPECT_FALSE(AddressIndex().resolve(a.data_ptr(), 4));
}

TEST(AddressIndex, ViewResolvesIntoItsBaseOrToItselfWhenDeclared) {
  torch::Tensor fused = torch::zeros({6, 4});
  torch::Tensor k = fused.narrow(0, 2, 2);  // rows 2..3, as a shard of a stacked qkv
  {
    AddressIndex index({{"qkv", fused}});
    auto hit = index.resolve(k.data_ptr(), k.nbytes());
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->name, "qkv");
    EXPECT_EQ(hit->offset, 2 * 4 * 4);
  }
  {
    // Both declared: the exact range wins over the enclosing one, whatever the order.
    AddressIndex index({{"qkv", fused}, {"k", k}});
    EXPECT_EQ(index.resolve(k.data_ptr(), k.nbytes())->name, "k");
    EXPECT_EQ(index.resolve(fused.data_ptr(), fused.nbytes())->name, "qkv");
    // A pointer inside k, no size: the smallest tensor holding it.
    EXPECT_EQ(index.resolve(at(k, 4), 0)->name, "k");
    EXPECT_EQ(index.resolve(at(fused, 4), 0)->name, "qkv");
  }
}

TEST(AddressIndex, TransposedViewCoversTheSameBytes) {
  torch::Tensor w = torch::zeros({3, 5});
  EXPECT_EQ(tensor_extent_bytes(w.t()), w.nbytes());
  // Columns 1..2 of every row: from (0, 1) to (2, 2), strides [5, 1]: (2 * 5 + 1 + 1) floats.
  EXPECT_EQ(tensor_extent_bytes(w.narrow(1, 1, 2)), 12u * sizeof(float));
  EXPECT_EQ(tensor_extent_bytes(torch::zeros({0, 4})), 0u);
}

TEST(AddressIndex, AliasesResolveToTheFirstListed) {
  torch::Tensor w = torch::zeros({4});
  torch::Tensor alias = w.detach();
  AddressIndex index({{"param", w}, {"extra", alias}});
  EXPECT_EQ(index.resolve(w.data_ptr(), w.nbytes())->name, "param");
}

TEST(AddressIndex, ManyTensorsResolveEach) {
  std::vector<NamedTensor> tensors;
  for (int i = 0; i < 500; ++i) tensors.push_back({fmt::format("t{}", i), torch::zeros({i % 7 + 1})});
  AddressIndex index(tensors);
  EXPECT_EQ(index.size(), 500u);
  for (const auto& t : tensors) {
    auto hit = index.resolve(at(t.tensor, t.tensor.nbytes() - 4), 4);
    ASSERT_TRUE(hit) << t.name;
    EXPECT_EQ(hit->name, t.name);
  }
}

TEST(ReplayTolerance, ExactBackendIsZeroWhateverTheNoise) {
  EXPECT_EQ(replay_tolerance(true, 0.0, 0.5, c10::ScalarType::Float, 100.0), 0.0);
}

TEST(ReplayTolerance, ComesFromTheNoiseFloorAndTheDtype) {
  // Noise floor dominates.
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.0, 1e-3, c10::ScalarType::Float, 1.0), 4e-3);
  // Dtype epsilon at the output's magnitude dominates: bf16 at magnitude 2.
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.0, 0.0, c10::ScalarType::BFloat16, 2.0),
                   kEpsilonMultiple * 7.8125e-03 * 2.0);
  // The backend's minimum is a floor.
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.5, 1e-3, c10::ScalarType::Float, 1.0), 0.5);
}

TEST(ReplayTolerance, UnmeasuredOrNonFiniteNoiseContributesNothing) {
  const double from_dtype = kEpsilonMultiple * dtype_epsilon(c10::ScalarType::Float) * 3.0;
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.0, -1.0, c10::ScalarType::Float, 3.0), from_dtype);
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.0, NAN, c10::ScalarType::Float, 3.0), from_dtype);
  EXPECT_DOUBLE_EQ(replay_tolerance(false, 0.0, INFINITY, c10::ScalarType::Float, 3.0), from_dtype);
  EXPECT_EQ(replay_tolerance(false, 0.0, -1.0, c10::ScalarType::Long, 3.0), 0.0) << "integers compare exactly";
}

}  // namespace
}  // namespace graphcheck
