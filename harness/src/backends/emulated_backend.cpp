#include "backends/emulated_backend.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "read_set.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

// Ops that synchronise with the host: a CUDA graph cannot capture them. The tracer bakes their
// results into the graph as constants, so they are seen through RecordFunction instead.
constexpr const char* kHostSyncOps[] = {"aten::item", "aten::_local_scalar_dense",
                                        "aten::is_nonzero", "aten::nonzero", "aten::equal"};

struct HostSyncLog {
  std::vector<std::string> ops;
};
thread_local HostSyncLog* t_host_sync_log = nullptr;

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  if (!t_host_sync_log) return nullptr;
  const char* name = fn.name();
  for (const char* op : kHostSyncOps) {
    if (std::strcmp(name, op) == 0) {
      t_host_sync_log->ops.emplace_back(name);
      break;
    }
  }
  return nullptr;
}

// Watches the ops run on this thread while it lives.
class HostSyncObserver {
 public:
  explicit HostSyncObserver(HostSyncLog& log)
      : m_handle(at::addThreadLocalCallback(
            at::RecordFunctionCallback(&on_op_enter).scopes({at::RecordScope::FUNCTION}))) {
    t_host_sync_log = &log;
  }
  ~HostSyncObserver() {
    at::removeCallback(m_handle);
    t_host_sync_log = nullptr;
  }
  HostSyncObserver(const HostSyncObserver&) = delete;
  HostSyncObserver& operator=(const HostSyncObserver&) = delete;

 private:
  at::CallbackHandle m_handle;
};

class EmulatedGraph final : public CapturedGraph {
 public:
  EmulatedGraph(std::int64_t batch_size, std::shared_ptr<torch::jit::Graph> graph,
                torch::Tensor input, torch::Tensor output, std::vector<ReadSetEntry> read_set)
      : m_batch_size(batch_size),
        m_graph(std::move(graph)),
        m_code(m_graph, fmt::format("graphcheck_emulated_bs{}", batch_size)),
        m_input(std::move(input)),
        m_output(std::move(output)),
        m_read_set(std::move(read_set)) {}

  [[nodiscard]] std::int64_t batch_size() const override { return m_batch_size; }
  [[nodiscard]] torch::Tensor static_input() const override { return m_input; }
  [[nodiscard]] torch::Tensor static_output() const override { return m_output; }
  [[nodiscard]] const std::vector<ReadSetEntry>& read_set() const override { return m_read_set; }

  void replay() override {
    torch::NoGradGuard no_grad;
    torch::jit::Stack stack{m_input};
    torch::jit::InterpreterState(m_code).run(stack);
    TORCH_CHECK(stack.size() == 1 && stack[0].isTensor(),
                "graphcheck: the captured forward must return one tensor");
    // The static output buffer keeps its address, as with a CUDA graph.
    m_output.copy_(stack[0].toTensor());
  }

 private:
  std::int64_t m_batch_size;
  std::shared_ptr<torch::jit::Graph> m_graph;
  torch::jit::Code m_code;
  torch::Tensor m_input;
  torch::Tensor m_output;
  std::vector<ReadSetEntry> m_read_set;
};

void pin_constants(torch::jit::Block* block, std::vector<ReadSetEntry>& read_set) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* sub : node->blocks()) pin_constants(sub, read_set);
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value) ||
        node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t) {
      continue;
    }
    const torch::Tensor live = node->t(c10::attr::value);
    if (!live.defined() || !live.has_storage()) continue;
    // Note [Pinned constants]: an alias over the captured storage, not the live TensorImpl.
    torch::Tensor pinned = at::empty({0}, live.options());
    pinned.set_(live.storage(), live.storage_offset(), live.sizes(), live.strides());
    node->t_(c10::attr::value, pinned);

    ReadSetEntry entry;
    entry.storage = live.storage();
    entry.storage_offset = live.storage_offset();
    entry.sizes = live.sizes().vec();
    entry.strides = live.strides().vec();
    entry.dtype = live.scalar_type();
    entry.address = live.data_ptr();
    read_set.push_back(std::move(entry));
  }
}

class EmulatedBackend final : public GraphBackend {
 public:
  [[nodiscard]] std::string name() const override { return "emulated"; }
  [[nodiscard]] double min_tolerance() const override { return 0.0; }

  std::unique_ptr<CapturedGraph> capture(LifecycleModel& model, const torch::Tensor& example_input,
                                         std::int64_t batch_size) override {
    torch::NoGradGuard no_grad;
    torch::Tensor input = example_input.clone();

    HostSyncLog host_syncs;
    std::shared_ptr<torch::jit::tracer::TracingState> state;
    torch::jit::Stack outputs;
    {
      HostSyncObserver observer(host_syncs);
      auto traced = [&model](torch::jit::Stack in) -> torch::jit::Stack {
        return {model.forward(in.at(0).toTensor())};
      };
      std::tie(state, outputs) = torch::jit::tracer::trace(
          {input}, traced, [](const torch::autograd::Variable&) { return std::string(); },
          /*strict=*/true, /*force_outplace=*/false);
    }

    if (!host_syncs.ops.empty()) {
      throw NotCapturable(fmt::format(
          "forward calls {} at batch size {}: a host sync, which a CUDA graph cannot capture "
          "(the value would be frozen at capture time); keep the value on the device",
          host_syncs.ops.front(), batch_size));
    }
    if (outputs.size() != 1 || !outputs[0].isTensor()) {
      throw NotCapturable("forward must return exactly one tensor to be captured");
    }

    std::vector<ReadSetEntry> read_set;
    pin_constants(state->graph->block(), read_set);
    resolve_read_set_names(read_set, live_tensors(model));

    torch::Tensor output = outputs[0].toTensor().clone();
    return std::make_unique<EmulatedGraph>(batch_size, state->graph, input, output,
                                           std::move(read_set));
  }
};

}  // namespace

std::unique_ptr<GraphBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

}  // namespace graphcheck
