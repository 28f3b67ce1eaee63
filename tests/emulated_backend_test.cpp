// The emulated backend must bake addresses the way a CUDA graph does: in-place updates are seen
// by replay, every kind of rebinding is not. See Note [Pinned constants].

#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "address_index.h"
#include "backends/emulated_backend.h"
#include "graphcheck/engine/backend.h"
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
    return m_backend->capture(m_model, {m_input}, m_input.size(0));
  }
  torch::Tensor replay(CapturedGraph& graph) {
    graph.static_inputs().at(0).copy_(m_input);
    graph.replay();
    return graph.static_outputs().at(0).clone();
  }
  std::vector<ResolvedRead> reads(const CapturedGraph& graph) {
    return resolve_reads(graph.reads(), AddressIndex(live_tensors(m_model)));
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

TEST_F(EmulatedBackendTest, ReadsResolveToEveryDeclaredTensorWithItsAddress) {
  auto graph = capture();
  EXPECT_TRUE(m_backend->keeps_storages_alive());
  const auto resolved = reads(*graph);
  std::map<std::string, const ResolvedRead*> by_name;
  for (const auto& r : resolved) by_name[r.name] = &r;
  ASSERT_EQ(by_name.size(), 3u) << "expected w, bias and derived";
  ASSERT_TRUE(by_name.count("w") && by_name.count("bias") && by_name.count("derived"));
  EXPECT_EQ(by_name["w"]->read.address, w().data_ptr());
  EXPECT_EQ(by_name["w"]->read.bytes, 16u * sizeof(float));
  EXPECT_EQ(by_name["w"]->read.sizes, (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(by_name["w"]->read.dtype, torch::kFloat32);
  EXPECT_TRUE(by_name["w"]->whole);
  EXPECT_EQ(by_name["w"]->offset, 0);
  EXPECT_EQ(by_name["derived"]->read.address, m_model.m_derived.data_ptr());
  EXPECT_EQ(graph->batch_size(), 3);
}

TEST_F(EmulatedBackendTest, ReadsHoldTheCapturedStorageAfterRebinding) {
  auto graph = capture();
  const void* old_address = m_model.m_derived.data_ptr();
  const auto before = reads(*graph);
  m_model.m_derived = torch::randn({4});
  int found = 0;
  for (const auto& r : before) {
    if (r.name != "derived") continue;
    ++found;
    ASSERT_TRUE(r.read.held);
    EXPECT_EQ(r.read.held.data(), old_address);
    // Resolved again now: nothing live covers the old range (orphaned).
    EXPECT_FALSE(AddressIndex(live_tensors(m_model)).resolve(r.read.address, r.read.bytes));
  }
  EXPECT_EQ(found, 1);
}

TEST_F(EmulatedBackendTest, UndeclaredTensorStaysUnresolved) {
  m_model.m_read_undeclared = true;
  auto graph = capture();
  int unnamed = 0;
  for (const auto& r : reads(*graph)) unnamed += r.name.empty();
  EXPECT_EQ(unnamed, 1);
}

TEST_F(EmulatedBackendTest, ViewOfADeclaredTensorResolvesIntoIt) {
  m_model.m_w_view = w().t();
  m_model.m_read_view = true;
  auto graph = capture();
  int views = 0;
  for (const auto& r : reads(*graph)) {
    if (r.name == "w" && r.read.strides != std::vector<std::int64_t>{4, 1}) {
      ++views;
      EXPECT_EQ(r.offset, 0);
      EXPECT_TRUE(r.whole);  // a transpose covers the same bytes
    }
  }
  EXPECT_EQ(views, 1);
}

TEST_F(EmulatedBackendTest, DataPtrReadIsInvisibleToTheRecordingButNotToFreshInputs) {
  // A branch on a value read through data_ptr() calls no op: the capture succeeds with the branch
  // taken at capture frozen in, and only a replay on an input that takes the other branch shows it.
  class Branchy : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      const float first = x.contiguous().data_ptr<float>()[0];
      return first > 0 ? x * 2 : x * -3;
    }
  } model;
  torch::Tensor positive = torch::ones({2, 4});
  auto graph = m_backend->capture(model, {positive}, 2);
  graph->static_inputs()[0].copy_(-positive);
  graph->replay();
  EXPECT_TRUE(torch::equal(graph->static_outputs()[0], -positive * 2));  // frozen branch
  EXPECT_FALSE(torch::equal(graph->static_outputs()[0], model.forward(-positive)));
}

TEST_F(EmulatedBackendTest, SeveralInputsAndOutputs) {
  class TwoWay : public TinyModel {
   public:
    TensorList forward_all(const TensorList& in) override {
      torch::Tensor w = m_module->named_parameters(false)["w"];
      return {torch::matmul(in[0], w) + in[1], in[0].sum(1)};
    }
  } model;
  TensorList inputs = {torch::randn({2, 4}), torch::randn({2, 4})};
  auto graph = m_backend->capture(model, inputs, 2);
  ASSERT_EQ(graph->static_inputs().size(), 2u);
  ASSERT_EQ(graph->static_outputs().size(), 2u);
  TensorList fresh = {torch::randn({2, 4}), torch::randn({2, 4})};
  for (int i = 0; i < 2; ++i) graph->static_inputs()[i].copy_(fresh[i]);
  graph->replay();
  const TensorList eager = model.forward_all(fresh);
  EXPECT_TRUE(torch::equal(graph->static_outputs()[0], eager[0]));
  EXPECT_TRUE(torch::equal(graph->static_outputs()[1], eager[1]));
}

// Note [Recorded forwards]: a CUDA graph replays every kernel its capture launched, so an op whose
// result the forward drops still runs on replay and still reads what it read.
TEST_F(EmulatedBackendTest, AnOpWhoseResultIsDroppedStillRunsAndReads) {
  class Dropping : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      m_kept = x * m_derived;  // computed, never returned
      return torch::matmul(x, m_module->named_parameters(false)["w"]);
    }
    torch::Tensor m_kept;
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  std::set<std::string> names;
  for (const auto& r : resolve_reads(graph->reads(), AddressIndex(live_tensors(model)))) names.insert(r.name);
  EXPECT_EQ(names, (std::set<std::string>{"w", "derived"}));
  graph->static_inputs().at(0).copy_(m_input);
  graph->replay();
  EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(m_input)));
}

// Note [Recorded forwards]: torch::tensor() writes host values into an aten::empty with no op. Its
// tensor is the graph's own memory, replayed with the values the capture wrote, and no read of the
// graph. A replay of aten::empty would hand back whatever the allocator holds.
TEST_F(EmulatedBackendTest, ATensorBuiltFromHostValuesKeepsThemOnReplay) {
  class Scaled : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      return x * torch::tensor({2.0F, 3.0F, 5.0F, 7.0F}) + torch::tensor(0.5F);
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  EXPECT_TRUE(graph->reads().empty()) << graph->reads().size() << " reads";
  for (int i = 0; i < 3; ++i) {
    const torch::Tensor fresh = torch::randn({3, 4});
    graph->static_inputs().at(0).copy_(fresh);
    graph->replay();
    EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(fresh)));
  }
}

// Note [Recorded forwards]: what the forward's own aten::empty returns is the graph's memory, the
// same bytes at every replay (a CUDA graph's pool), and an op that writes into it (out=) runs.
TEST_F(EmulatedBackendTest, AnEmptyBufferTheForwardWritesIsTheSameMemoryAtEveryReplay) {
  class OutParameter : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor out = torch::empty({x.size(0), 4});
      torch::mm_out(out, x, m_module->named_parameters(false)["w"]);
      m_out = out;
      return out + 1;
    }
    torch::Tensor m_out;
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  const void* buffer = model.m_out.data_ptr();
  for (int i = 0; i < 2; ++i) {
    const torch::Tensor fresh = torch::randn({3, 4});
    graph->static_inputs().at(0).copy_(fresh);
    graph->replay();
    const torch::Tensor product = torch::matmul(fresh, model.m_module->named_parameters(false)["w"]);
    EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), product + 1));
    // The capture's buffer holds this replay's product: replay wrote into it, not into a new one.
    EXPECT_TRUE(torch::equal(model.m_out, product)) << "replay " << i;
    EXPECT_EQ(model.m_out.data_ptr(), buffer);
  }
}

// Note [Recorded forwards]: replay drops each value after its last use, as eager frees it, and
// keeps nothing of its own after it: a chain of ten 4 MiB intermediates never holds them all.
TEST_F(EmulatedBackendTest, ReplayDropsEachValueAfterItsLastUse) {
  class Chain : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor y = x;
      for (int i = 0; i < 10; ++i) {
        torch::Tensor next = y * 1.5F + m_derived;
        (void)torch::empty_like(y);  // y's last use: an op replay does not run
        y = next;
      }
      return y.sum(1);
    }
  } model;
  const torch::Tensor big = torch::randn({1 << 18, 4});  // 4 MiB
  auto graph = m_backend->capture(model, {big}, big.size(0));
  MemoryMeter& meter = m_backend->memory_meter();
  meter.start();
  meter.reset_peak();
  const std::int64_t before = meter.live_bytes();
  const std::uint64_t moment = meter.now();
  graph->replay();
  const std::int64_t peak = meter.peak_bytes() - before;
  EXPECT_EQ(meter.alive_since(moment), 0);
  meter.stop();
  EXPECT_LE(peak, 3 * (4 << 20)) << "peak " << peak << " bytes over the replay";
  EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(big)));
}

// Note [Recorded forwards]: `.data` is a tensor made with no op over memory an op returned; an
// in-place op on it changes that value, at replay too (it is recorded as a view of the value,
// not baked as a constant holding the capture's bytes).
TEST_F(EmulatedBackendTest, AnInPlaceOpThroughDataChangesTheValueOnReplay) {
  class Clamped : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor h = torch::matmul(x, m_module->named_parameters(false)["w"]);
      h.data().clamp_(-0.5, 0.5);
      return h + 1;
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  for (int i = 0; i < 2; ++i) {
    const torch::Tensor fresh = torch::randn({3, 4}) * 4;
    graph->static_inputs().at(0).copy_(fresh);
    graph->replay();
    EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(fresh))) << "replay " << i;
  }
}

// Note [Recorded forwards]: host values written into the graph's own memory (torch::tensor) are
// copied in again at every replay, as a CUDA graph's memcpy node does: an in-place op on them
// starts from the host's values each time, not from the last replay's.
TEST_F(EmulatedBackendTest, AHostBuiltTensorAnOpUpdatesInPlaceStartsFromTheHostValuesAtEveryReplay) {
  class Accumulating : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      // From a vector: aten::empty and a raw copy, no op that writes the values (an initializer
      // list fills them element by element with ops).
      torch::Tensor acc = torch::tensor(std::vector<float>{1.0F, 2.0F, 3.0F, 4.0F});
      acc.add_(x.sum(0));
      return x + acc;
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  for (int i = 0; i < 3; ++i) {
    graph->static_inputs().at(0).copy_(m_input);
    graph->replay();
    EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(m_input))) << "replay " << i;
  }
}

// Note [Recapture signature]: a host value that reaches an op as a tensor the forward builds from
// it (no op takes the value itself) is part of the signature, named by the op that first reads it
// (torch.tensor(self.amax) in Python).
TEST_F(EmulatedBackendTest, RecaptureNamesAHostValueTheForwardWritesIntoATensor) {
  class HostBuilt : public TinyModel {
   public:
    float m_scale = 0.5F;
    torch::Tensor forward(const torch::Tensor& x) override {
      std::vector<float> row(16, 1.0F);
      row[9] = m_scale;
      const torch::Tensor scaled = x * torch::tensor(std::vector<float>{m_scale});
      return scaled + torch::tensor(row).sum();
    }
  } model;
  (void)model.forward(m_input);  // warm-up: the capture's empty() may get this run's block back
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  EXPECT_FALSE(m_backend->recapture_diff(*graph, model, {m_input}).differs());
  model.m_scale = 0.25F;
  const RecaptureDiff d = m_backend->recapture_diff(*graph, model, {m_input});
  ASSERT_TRUE(d.supported) << d.unsupported_reason;
  EXPECT_FALSE(d.control_flow_differs) << d.divergence;
  ASSERT_EQ(d.values.size(), 2U);
  EXPECT_EQ(d.values[0].op, "aten::mul");
  EXPECT_EQ(d.values[0].argument, 1);
  EXPECT_EQ(d.values[0].at_capture, "tensor([0.5])");
  EXPECT_EQ(d.values[0].now, "tensor([0.25])");
  EXPECT_EQ(d.values[1].op, "aten::sum");
  EXPECT_EQ(d.values[1].at_capture, "a tensor of 16 values whose element 9 is 0.5");
  EXPECT_EQ(d.values[1].now, "a tensor of 16 values whose element 9 is 0.25");
}

// Bytes of an empty() buffer that nothing wrote (an in-place op on it that leaves part of it as it
// was) are no host value: two recordings of one forward agree on them whatever the allocator
// handed each.
TEST_F(EmulatedBackendTest, RecaptureComparesNoBytesOfAnEmptyBufferThatNothingWrote) {
  class Partial : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor buffer = torch::empty({4096});
      buffer.masked_fill_(torch::arange(4096) < 8, 1.0);
      return x + buffer.narrow(0, 0, 4).sum();
    }
  } model;
  // Before each recording a block of the buffer's size is written and freed, so that its empty()
  // most likely gets it back holding other bytes.
  const auto dirty = [](float value) { (void)torch::full({4096}, value); };
  dirty(1);
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  dirty(2);
  const RecaptureDiff d = m_backend->recapture_diff(*graph, model, {m_input});
  EXPECT_TRUE(d.supported) << d.unsupported_reason;
  EXPECT_FALSE(d.differs()) << (d.values.empty() ? d.divergence : d.values.front().op + ": " + d.values.front().at_capture);
}

// A host-built tensor whose first op may return a view or a copy of it (to(), contiguous()): a copy
// read its bytes, and they are compared (torch.tensor(self.amax).to(x.dtype) in Python).
TEST_F(EmulatedBackendTest, RecaptureNamesAHostValueThatAnOpCopiesBeforeUse) {
  class Converted : public TinyModel {
   public:
    double m_scale = 0.5;
    torch::Tensor forward(const torch::Tensor& x) override {
      return x * torch::tensor(std::vector<double>{m_scale}).to(torch::kFloat32);
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  model.m_scale = 0.25;
  const RecaptureDiff d = m_backend->recapture_diff(*graph, model, {m_input});
  ASSERT_EQ(d.values.size(), 1U) << d.divergence;
  EXPECT_EQ(d.values[0].op, "aten::to");
  EXPECT_EQ(d.values[0].at_capture, "tensor([0.5])");
  EXPECT_EQ(d.values[0].now, "tensor([0.25])");
}

// An op that overwrites part of a host-built tensor (copy_ into a view of it) leaves the rest as
// the host wrote it: still compared.
TEST_F(EmulatedBackendTest, RecaptureNamesHostValuesAnOpOverwritesOnlyPartOf) {
  class PartOverwritten : public TinyModel {
   public:
    float m_b = 0.5F;
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor t = torch::tensor(std::vector<float>{0.0F, m_b, 2.0F});
      t.narrow(0, 0, 1).copy_(x.sum().reshape({1}));
      return x * t.narrow(0, 1, 1);
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  EXPECT_FALSE(m_backend->recapture_diff(*graph, model, {m_input}).differs());
  model.m_b = 0.25F;
  const RecaptureDiff d = m_backend->recapture_diff(*graph, model, {m_input});
  ASSERT_EQ(d.values.size(), 1U) << d.divergence;
  EXPECT_EQ(d.values[0].op, "aten::copy_");
  EXPECT_EQ(d.values[0].at_capture, "tensor([0, 0.5, 2])");
  EXPECT_EQ(d.values[0].now, "tensor([0, 0.25, 2])");
  for (int i = 0; i < 2; ++i) {  // and replay starts from the capture's bytes
    graph->static_inputs().at(0).copy_(m_input);
    graph->replay();
  }
  model.m_b = 0.5F;
  EXPECT_TRUE(torch::allclose(graph->static_outputs().at(0), model.forward(m_input)));
}

// What resize_ adds to an empty() buffer is no host value either.
TEST_F(EmulatedBackendTest, RecaptureComparesNoBytesResizeAddsToAnEmptyBuffer) {
  class Grown : public TinyModel {
   public:
    int m_dirt = 1;
    torch::Tensor forward(const torch::Tensor& x) override {
      {
        // A block of the size resize_ asks for, written and freed with no op: resize_ most likely
        // gets it back holding this run's bytes.
        const c10::DataPtr junk = c10::GetCPUAllocator()->allocate(4096 * sizeof(float));
        std::memset(junk.get(), m_dirt, 4096 * sizeof(float));
      }
      torch::Tensor buffer = torch::empty({0});
      buffer.resize_({4096});
      buffer.masked_fill_(torch::arange(4096) < 8, 1.0);
      return x + buffer.narrow(0, 0, 4).sum();
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  model.m_dirt = 2;
  const RecaptureDiff d = m_backend->recapture_diff(*graph, model, {m_input});
  EXPECT_FALSE(d.differs()) << (d.values.empty() ? d.divergence : d.values.front().op + ": " + d.values.front().at_capture);
}

// empty's out= overload returns the caller's tensor: a read of the graph at its address, left as
// it was, not memory of the graph's own.
TEST_F(EmulatedBackendTest, EmptyIntoAnOutTensorIsNoMemoryOfTheGraphsOwn) {
  class PoolOut : public TinyModel {
   public:
    torch::Tensor m_pool = torch::ones({4});
    torch::Tensor forward(const torch::Tensor& x) override {
      at::empty_out(m_pool, {4});
      return x + m_pool;
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  EXPECT_TRUE(torch::equal(model.m_pool, torch::ones({4})));
  const auto& reads = graph->reads();
  EXPECT_TRUE(std::any_of(reads.begin(), reads.end(), [&](const GraphRead& r) { return r.address == model.m_pool.data_ptr(); }));
  model.m_pool.fill_(3.0);
  graph->static_inputs().at(0).copy_(m_input);
  graph->replay();
  EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(m_input)));
}

// A view made before the forward of memory one of the forward's ops also views (a layer's slice
// of a cache pool the forward indexes too) is a constant of its own, a read of the graph at its
// own address: memory an op returned is an op's only when the op allocated it, not when it returns
// a view of one of its arguments.
TEST_F(EmulatedBackendTest, ATensorOverAWeightsMemoryThatAnOpAlsoViewsStaysAReadOfTheGraph) {
  class Pooled : public TinyModel {
   public:
    Pooled() : m_pool(torch::randn({2, 4})), m_layer1(m_pool.select(0, 1)) {}
    torch::Tensor forward(const torch::Tensor& x) override { return x + m_pool.select(0, 0) + m_layer1; }
    std::vector<NamedTensor> extra_tensors() override { return {{"pool", m_pool}, {"layer1", m_layer1}}; }
    torch::Tensor m_pool, m_layer1;
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  std::vector<const void*> addresses;
  for (const GraphRead& r : graph->reads()) addresses.push_back(r.address);
  EXPECT_NE(std::find(addresses.begin(), addresses.end(), model.m_pool.data_ptr()), addresses.end());
  EXPECT_NE(std::find(addresses.begin(), addresses.end(), model.m_layer1.data_ptr()), addresses.end())
      << graph->reads().size() << " reads";
}

// The graph's own memory starts every replay with the sizes it was made with: an op that changes
// them in place (unsqueeze_, resize_) did so at capture and does so again at each replay.
TEST_F(EmulatedBackendTest, OwnMemoryAnOpReshapesInPlaceStartsEveryReplayAsItWasMade) {
  class Unsqueezed : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      torch::Tensor s = torch::tensor(std::vector<float>{1.0F, 2.0F, 3.0F, 4.0F});
      s.unsqueeze_(0);
      return x + s;
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  for (int i = 0; i < 3; ++i) {
    graph->static_inputs().at(0).copy_(m_input);
    graph->replay();
    EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), model.forward(m_input))) << "replay " << i;
  }
}

// An op that throws inside a forward that catches it returned nothing: the recording leaves it out
// (replay must not throw it again), and the capture stands.
TEST_F(EmulatedBackendTest, AnOpThatThrowsInsideACaughtTryIsNotRecorded) {
  class Tries : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override {
      try {
        (void)x.view({-1, 7});  // 3x4 elements: no such view
      } catch (const c10::Error&) {
      }
      return x * 2;
    }
  } model;
  auto graph = m_backend->capture(model, {m_input}, m_input.size(0));
  graph->static_inputs().at(0).copy_(m_input);
  graph->replay();
  EXPECT_TRUE(torch::equal(graph->static_outputs().at(0), m_input * 2));
}

// The same tensor passed as two inputs: two graph inputs, each its own static buffer.
TEST_F(EmulatedBackendTest, OneTensorPassedAsTwoInputs) {
  class Sum : public TinyModel {
   public:
    TensorList forward_all(const TensorList& in) override { return {in[0] * 2 + in[1]}; }
  } model;
  torch::Tensor x = torch::randn({2, 4});
  auto graph = m_backend->capture(model, {x, x}, 2);
  ASSERT_EQ(graph->static_inputs().size(), 2u);
  TensorList fresh = {torch::randn({2, 4}), torch::randn({2, 4})};
  for (int i = 0; i < 2; ++i) graph->static_inputs()[i].copy_(fresh[i]);
  graph->replay();
  EXPECT_TRUE(torch::equal(graph->static_outputs()[0], fresh[0] * 2 + fresh[1]));
}

TEST_F(EmulatedBackendTest, WiderHostSyncOpsAreNotCapturable) {
  class Masked : public TinyModel {
   public:
    torch::Tensor forward(const torch::Tensor& x) override { return x.masked_select(x > 0).sum() + x; }
  } model;
  try {
    (void)m_backend->capture(model, {torch::randn({2, 4})}, 2);
    FAIL() << "masked_select reads data to the host on CUDA";
  } catch (const NotCapturable& e) {
    EXPECT_NE(std::string(e.what()).find("aten::masked_select"), std::string::npos) << e.what();
  }
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
  const BackendChoice choice = make_backend("auto");
  EXPECT_EQ(choice.backend->name(), "emulated");
  EXPECT_NE(choice.reason.find("auto:"), std::string::npos) << choice.reason;
  try {
    (void)make_backend("cuda");
    FAIL() << "the cuda backend is not built";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("use --backend emulated"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace graphcheck
