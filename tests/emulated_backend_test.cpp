// The emulated backend must bake addresses the way a CUDA graph does: in-place updates are seen
// by replay, every kind of rebinding is not. See Note [Pinned constants].

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "backends/emulated_backend.h"
#include "graphcheck/backend.h"
#include "graphcheck/model.h"

namespace graphcheck {
namespace {

class TinyModule : public torch::nn::Module {
 public:
  TinyModule() {
    register_parameter("w", torch::randn({4, 4}), /*requires_grad=*/false);
    register_buffer("bias", torch::randn({4}));
  }
  // What `module.w = nn.Parameter(new)` does in Python: the registry now holds another tensor.
  void replace_parameter(const std::string& name, torch::Tensor t) { parameters_[name] = t; }
};

// forward(x) = x @ w + bias + derived, reading w and bias through the module's registries (so
// replacing a registered parameter is seen by eager) and derived as a plain member.
class TinyModel : public LifecycleModel {
 public:
  TinyModel() : m_module(std::make_shared<TinyModule>()), m_derived(torch::randn({4})) {}
  torch::nn::Module& module() override { return *m_module; }
  std::set<std::string> load_weights(WeightStream& weights) override {
    return load_module_weights(*this, weights);
  }
  void process_weights_after_loading() override {}
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor w = m_module->named_parameters(false)["w"];
    torch::Tensor bias = m_module->named_buffers(false)["bias"];
    torch::Tensor y = torch::matmul(x, w) + bias + m_derived;
    if (m_sync_with_host) y = y * y.sum().item<double>();
    if (m_read_undeclared) y = y + m_undeclared;
    if (m_read_view) y = y + m_w_view.sum(0);
    return y;
  }
  torch::Tensor make_input(std::int64_t batch_size, std::uint64_t seed) override {
    torch::manual_seed(seed);
    return torch::randn({batch_size, 4});
  }
  std::vector<NamedTensor> extra_tensors() override { return {{"derived", m_derived}}; }

  std::shared_ptr<TinyModule> m_module;
  torch::Tensor m_derived;
  torch::Tensor m_undeclared = torch::randn({4});
  torch::Tensor m_w_view;
  bool m_sync_with_host = false;
  bool m_read_undeclared = false;
  bool m_read_view = false;
};

class EmulatedBackendTest : public ::testing::Test {
 protected:
  torch::NoGradGuard m_no_grad;
  TinyModel m_model;
  std::unique_ptr<GraphBackend> m_backend = make_emulated_backend();
  torch::Tensor m_input = torch::randn({3, 4});

  std::unique_ptr<CapturedGraph> capture() {
    m_model.forward(m_input);  // warm-up
    return m_backend->capture(m_model, m_input, m_input.size(0));
  }
  torch::Tensor replay(CapturedGraph& graph) {
    graph.static_input().copy_(m_input);
    graph.replay();
    return graph.static_output().clone();
  }
  torch::Tensor w() { return m_model.m_module->named_parameters(false)["w"]; }
};

TEST_F(EmulatedBackendTest, ReplayEqualsEagerRightAfterCapture) {
  auto graph = capture();
  EXPECT_TRUE(torch::equal(replay(*graph), m_model.forward(m_input)));
}

TEST_F(EmulatedBackendTest, InPlaceCopyIsVisibleToReplay) {
  auto graph = capture();
  const torch::Tensor before = replay(*graph);
  w().copy_(torch::randn({4, 4}));
  m_model.m_derived.copy_(torch::randn({4}));
  const torch::Tensor after = replay(*graph);
  EXPECT_FALSE(torch::equal(before, after));
  EXPECT_TRUE(torch::equal(after, m_model.forward(m_input)));
}

TEST_F(EmulatedBackendTest, RebindingAMemberIsInvisibleToReplay) {
  auto graph = capture();
  const torch::Tensor before = replay(*graph);
  m_model.m_derived = torch::randn({4});  // the pre-fix finalize: a fresh tensor
  EXPECT_TRUE(torch::equal(replay(*graph), before));
  EXPECT_FALSE(torch::equal(replay(*graph), m_model.forward(m_input)));
}

TEST_F(EmulatedBackendTest, SetDataIsInvisibleToReplay) {
  auto graph = capture();
  const torch::Tensor before = replay(*graph);
  w().set_data(torch::randn({4, 4}));  // same TensorImpl, new storage
  EXPECT_TRUE(torch::equal(replay(*graph), before));
  EXPECT_FALSE(torch::equal(replay(*graph), m_model.forward(m_input)));
}

TEST_F(EmulatedBackendTest, ReplacingARegisteredParameterIsInvisibleToReplay) {
  auto graph = capture();
  const torch::Tensor before = replay(*graph);
  m_model.m_module->replace_parameter("w", torch::randn({4, 4}));
  EXPECT_TRUE(torch::equal(replay(*graph), before));
  EXPECT_FALSE(torch::equal(replay(*graph), m_model.forward(m_input)));
}

TEST_F(EmulatedBackendTest, ReadSetNamesEveryDeclaredTensorWithItsAddress) {
  auto graph = capture();
  std::map<std::string, const ReadSetEntry*> by_name;
  for (const auto& e : graph->read_set()) by_name[e.name] = &e;
  ASSERT_EQ(by_name.size(), 3u) << "expected w, bias and derived";
  ASSERT_TRUE(by_name.count("w") && by_name.count("bias") && by_name.count("derived"));
  EXPECT_EQ(by_name["w"]->address, w().data_ptr());
  EXPECT_EQ(by_name["w"]->sizes, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(by_name["w"]->dtype, torch::kFloat32);
  EXPECT_FALSE(by_name["w"]->is_view);
  EXPECT_EQ(by_name["derived"]->address, m_model.m_derived.data_ptr());
  EXPECT_EQ(graph->batch_size(), 3);
}

TEST_F(EmulatedBackendTest, ReadSetKeepsTheCapturedStorageAfterRebinding) {
  auto graph = capture();
  const void* old_address = m_model.m_derived.data_ptr();
  m_model.m_derived = torch::randn({4});
  for (const auto& e : graph->read_set()) {
    if (e.name == "derived") {
      EXPECT_EQ(e.storage.data(), old_address);
    }
  }
}

TEST_F(EmulatedBackendTest, UndeclaredTensorStaysUnnamed) {
  m_model.m_read_undeclared = true;
  auto graph = capture();
  int unnamed = 0;
  for (const auto& e : graph->read_set()) unnamed += e.name.empty();
  EXPECT_EQ(unnamed, 1);
}

TEST_F(EmulatedBackendTest, ViewOfADeclaredTensorIsNamedAsAView) {
  m_model.m_w_view = w().t();
  m_model.m_read_view = true;
  auto graph = capture();
  int views = 0;
  for (const auto& e : graph->read_set()) {
    if (e.is_view) {
      ++views;
      EXPECT_EQ(e.name, "w");
    }
  }
  EXPECT_EQ(views, 1);
}

TEST_F(EmulatedBackendTest, HostSyncIsNotCapturable) {
  m_model.m_sync_with_host = true;
  try {
    capture();
    FAIL() << "a forward calling item() must not be capturable";
  } catch (const NotCapturable& e) {
    EXPECT_NE(std::string(e.what()).find("aten::item"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host sync"), std::string::npos) << e.what();
  }
}

TEST_F(EmulatedBackendTest, UnknownBackendNamesTheChoices) {
  try {
    (void)make_backend("tpu");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("auto, emulated or cuda"), std::string::npos);
  }
  EXPECT_EQ(make_backend("auto")->name(), "emulated");
}

}  // namespace
}  // namespace graphcheck
