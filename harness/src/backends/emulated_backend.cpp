#include "backends/emulated_backend.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "address_index.h"
#include "counting_allocator.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

// Ops that synchronise with the host: a CUDA graph cannot capture them. The tracer bakes their
// results into the graph as constants, so they are seen through RecordFunction instead.
// Ops that read data to the host on CUDA (a sync inside the op). Reading a value through
// data_ptr() or .cpu() on a CPU tensor calls no op at all: the capture validation (replays on
// fresh inputs vs eager) catches the control flow such a read freezes.
constexpr const char* kHostSyncOps[] = {
    "aten::item",           "aten::_local_scalar_dense", "aten::is_nonzero",
    "aten::nonzero",        "aten::argwhere",            "aten::masked_select",
    "aten::unique",         "aten::_unique",             "aten::_unique2",
    "aten::unique_dim",     "aten::unique_consecutive",  "aten::unique_dim_consecutive",
    "aten::equal",          "aten::allclose",            "aten::bincount",
    "aten::tolist",         "aten::nonzero_numpy"};

struct HostSyncLog {
  std::vector<std::string> ops;  // "aten::item", or "aten::item (inside aten::index)"
  // The ops of the forward's own calls (not those aten ops make inside), innermost last.
  struct Frame {
    std::string name;
    bool shape_scalars = false;  // it takes a 0-dim shape-derived tensor (repeats = x.size(-1))
  };
  std::vector<Frame> stack;
};
thread_local HostSyncLog* t_host_sync_log = nullptr;

// Note [Shape-derived host reads]: under the tracer a Python `x.shape[i]` is a 0-dim tensor (an
// aten::size node), so Python control flow on a shape (`if seq_len > 1:`) reads it back with
// aten::item or aten::is_nonzero. That is no host sync of device data: a graph captured at one
// batch size is specialised to its shapes anyway, as a CUDA graph is. A value is shape-derived
// when every path back through the trace ends in a shape query (aten::size, numel, dim) or a
// non-tensor or wrapped-number constant; one that reaches an input or a model tensor is data.
bool shape_derived(const torch::jit::Value* value, std::set<const torch::jit::Value*>& seen, int depth) {
  if (depth > 64) return false;
  if (!seen.insert(value).second) return true;
  const torch::jit::Node* node = value->node();
  const c10::Symbol kind = node->kind();
  if (kind == c10::aten::size || kind == c10::aten::sym_size || kind == c10::aten::numel ||
      kind == c10::aten::dim) {
    return true;
  }
  if (kind == c10::prim::Constant) {
    if (!node->hasAttribute(c10::attr::value) || node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t) {
      return true;  // a number, a list of numbers, none
    }
    const torch::Tensor t = node->t(c10::attr::value);
    return t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number();  // a Python scalar, not a model tensor
  }
  // Scalar arithmetic and comparisons on shapes, and the conversions between numbers and 0-dim
  // tensors. Anything else (a graph input, a model tensor, a factory such as aten::rand or
  // aten::empty, a reduction) is data.
  static const std::set<c10::Symbol> kShapeArithmetic = {
      c10::prim::NumToTensor, c10::aten::Int,       c10::aten::Float,     c10::aten::ScalarImplicit,
      c10::aten::add,         c10::aten::sub,       c10::aten::mul,       c10::aten::div,
      c10::aten::floor_divide, c10::aten::floordiv, c10::aten::remainder, c10::aten::neg,
      c10::aten::eq,          c10::aten::ne,        c10::aten::lt,        c10::aten::le,
      c10::aten::gt,          c10::aten::ge,        c10::aten::__and__,   c10::aten::__or__,
      c10::aten::min,         c10::aten::max,       c10::prim::ListConstruct, c10::prim::TupleConstruct};
  if (!kShapeArithmetic.count(kind)) return false;
  for (const torch::jit::Value* input : node->inputs()) {
    if (!shape_derived(input, seen, depth + 1)) return false;
  }
  return true;
}

bool is_shape_value(const c10::IValue& input) {
  const auto state = torch::jit::tracer::getTracingState();
  if (!state || !input.isTensor() || !state->hasValue(input)) return false;
  std::set<const torch::jit::Value*> seen;
  return shape_derived(state->getValue(input), seen, 0);
}

bool reads_shape_only(const at::RecordFunction& fn) {
  const auto inputs = fn.inputs();
  return !inputs.empty() && is_shape_value(inputs[0]);
}

// Ops that take an int which the tracer turns into a 0-dim tensor when it is a shape, and whose
// kernel then reads it back: `h.repeat_interleave(x.size(-1), dim=0)` takes the Tensor overload
// under the tracer, and its kernel calls aten::item on the repeats; a CUDA capture runs the int
// overload, which reads nothing back. Other ops' nested host reads stay findings, whatever
// scalars they take (`y[mask] = x.shape[0]` still runs nonzero on the mask).
constexpr const char* kShapeScalarOps[] = {"aten::repeat_interleave"};

// One of kShapeScalarOps, given a 0-dim tensor that is a shape.
bool takes_shape_scalar(const at::RecordFunction& fn) {
  bool listed = false;
  for (const char* op : kShapeScalarOps) listed = listed || std::strcmp(fn.name(), op) == 0;
  if (!listed) return false;
  for (const c10::IValue& input : fn.inputs()) {
    if (input.isTensor() && input.toTensor().defined() && input.toTensor().dim() == 0 && is_shape_value(input)) {
      return true;
    }
  }
  return false;
}

// Ops whose CPU kernels read a value back to the host where the CUDA kernel reads nothing (the
// host read is the CPU implementation's, not the model's): their nested host syncs are no
// capture problem.
constexpr const char* kCudaNoSyncOps[] = {"aten::_grouped_mm"};

bool is_host_sync_op(const char* name) {
  for (const char* op : kHostSyncOps) {
    if (std::strcmp(name, op) == 0) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  HostSyncLog* log = t_host_sync_log;
  if (!log) return nullptr;
  const char* name = fn.name();
  const bool top = log->stack.empty();
  if (is_host_sync_op(name)) {
    if (top) {
      if (!reads_shape_only(fn)) log->ops.emplace_back(name);  // Note [Shape-derived host reads]
    } else {
      const HostSyncLog::Frame& outer = log->stack.front();
      bool exempt = outer.shape_scalars || reads_shape_only(fn);
      for (const char* op : kCudaNoSyncOps) exempt = exempt || outer.name == op;
      if (!exempt) log->ops.push_back(fmt::format("{} (inside {})", name, outer.name));
    }
  }
  log->stack.push_back({name, top && takes_shape_scalar(fn)});
  return nullptr;
}

void on_op_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (t_host_sync_log && !t_host_sync_log->stack.empty()) t_host_sync_log->stack.pop_back();
}

// Watches the ops run on this thread while it lives.
class HostSyncObserver {
 public:
  explicit HostSyncObserver(HostSyncLog& log)
      : m_handle(at::addThreadLocalCallback(
            at::RecordFunctionCallback(&on_op_enter, &on_op_exit).needsInputs(true).scopes({at::RecordScope::FUNCTION}))) {
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
                TensorList inputs, TensorList outputs, std::vector<GraphRead> reads)
      : m_batch_size(batch_size),
        m_graph(std::move(graph)),
        m_code(m_graph, fmt::format("graphcheck_emulated_bs{}", batch_size)),
        m_inputs(std::move(inputs)),
        m_outputs(std::move(outputs)),
        m_reads(std::move(reads)) {}

  [[nodiscard]] std::int64_t batch_size() const override { return m_batch_size; }
  [[nodiscard]] const TensorList& static_inputs() const override { return m_inputs; }
  [[nodiscard]] const TensorList& static_outputs() const override { return m_outputs; }
  [[nodiscard]] const std::vector<GraphRead>& reads() const override { return m_reads; }

  void replay() override {
    torch::NoGradGuard no_grad;
    torch::jit::Stack stack(m_inputs.begin(), m_inputs.end());
    torch::jit::InterpreterState(m_code).run(stack);
    TORCH_CHECK(stack.size() == m_outputs.size(), "graphcheck: the captured forward returned ",
                stack.size(), " values, captured with ", m_outputs.size());
    // The static output buffers keep their addresses, as with a CUDA graph.
    for (std::size_t i = 0; i < stack.size(); ++i) {
      TORCH_CHECK(stack[i].isTensor(), "graphcheck: output ", i, " of the replay is not a tensor");
      m_outputs[i].copy_(stack[i].toTensor());
    }
  }

 private:
  std::int64_t m_batch_size;
  std::shared_ptr<torch::jit::Graph> m_graph;
  torch::jit::Code m_code;
  TensorList m_inputs;
  TensorList m_outputs;
  std::vector<GraphRead> m_reads;
};

void pin_constants(torch::jit::Block* block, std::vector<GraphRead>& reads) {
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* sub : node->blocks()) pin_constants(sub, reads);
    if (node->kind() != c10::prim::Constant || !node->hasAttribute(c10::attr::value) ||
        node->kindOf(c10::attr::value) != torch::jit::AttributeKind::t) {
      continue;
    }
    const torch::Tensor live = node->t(c10::attr::value);
    if (!live.defined() || !live.has_storage()) continue;
    // A Python scalar the tracer wrapped (`x * 0.5`): a value of the code, not a tensor it reads.
    if (live.unsafeGetTensorImpl()->is_wrapped_number()) continue;
    // Note [Pinned constants]: an alias over the captured storage, not the live TensorImpl.
    torch::Tensor pinned = at::empty({0}, live.options());
    pinned.set_(live.storage(), live.storage_offset(), live.sizes(), live.strides());
    node->t_(c10::attr::value, pinned);

    GraphRead read;
    read.address = live.data_ptr();
    read.bytes = tensor_extent_bytes(live);
    read.dtype = live.scalar_type();
    read.sizes = live.sizes().vec();
    read.strides = live.strides().vec();
    read.held = live.storage();  // the pinned alias keeps it alive
    reads.push_back(std::move(read));
  }
}

// The CPU memory meter: the counting wrapper around libtorch's CPU allocator.
class CpuMemoryMeter final : public MemoryMeter {
 public:
  [[nodiscard]] std::string name() const override { return "cpu counting allocator"; }
  void start() override { CountingCpuAllocator::instance().install(); }
  void stop() override { CountingCpuAllocator::instance().uninstall(); }
  [[nodiscard]] std::uint64_t now() const override { return CountingCpuAllocator::instance().now(); }
  [[nodiscard]] std::int64_t live_bytes() const override {
    return CountingCpuAllocator::instance().live_bytes();
  }
  [[nodiscard]] std::int64_t alive_since(std::uint64_t moment) const override {
    return CountingCpuAllocator::instance().alive_since(moment);
  }
  [[nodiscard]] std::int64_t peak_bytes() const override {
    return CountingCpuAllocator::instance().peak_bytes();
  }
  void reset_peak() override { CountingCpuAllocator::instance().reset_peak(); }
};

class EmulatedBackend final : public GraphBackend {
 public:
  [[nodiscard]] std::string name() const override { return "emulated"; }
  [[nodiscard]] bool exact() const override { return true; }
  [[nodiscard]] double min_tolerance() const override { return 0.0; }
  [[nodiscard]] bool keeps_storages_alive() const override { return true; }
  [[nodiscard]] MemoryMeter& memory_meter() override { return m_meter; }
  void synchronize() override {}

  std::unique_ptr<CapturedGraph> capture(LifecycleModel& model, const TensorList& example_inputs,
                                         std::int64_t batch_size) override {
    torch::NoGradGuard no_grad;
    TensorList inputs;
    torch::jit::Stack stack;
    for (const auto& t : example_inputs) {
      inputs.push_back(t.clone());
      stack.emplace_back(inputs.back());
    }

    HostSyncLog host_syncs;
    std::shared_ptr<torch::jit::tracer::TracingState> state;
    torch::jit::Stack outputs;
    {
      HostSyncObserver observer(host_syncs);
      auto traced = [&model](torch::jit::Stack in) -> torch::jit::Stack {
        TensorList args;
        for (auto& v : in) args.push_back(v.toTensor());
        TensorList out = model.forward_all(args);
        return torch::jit::Stack(out.begin(), out.end());
      };
      std::tie(state, outputs) = torch::jit::tracer::trace(
          std::move(stack), traced, [](const torch::autograd::Variable&) { return std::string(); },
          /*strict=*/true, /*force_outplace=*/false);
    }

    if (!host_syncs.ops.empty()) {
      throw NotCapturable(fmt::format(
          "forward calls {} at batch size {}: a host sync, which a CUDA graph cannot capture "
          "(the value would be frozen at capture time); keep the value on the device",
          host_syncs.ops.front(), batch_size));
    }
    if (outputs.empty()) throw NotCapturable("forward must return at least one tensor to be captured");
    TensorList static_outputs;
    for (auto& v : outputs) {
      if (!v.isTensor()) throw NotCapturable("every output of a captured forward must be a tensor");
      static_outputs.push_back(v.toTensor().clone());
    }

    std::vector<GraphRead> reads;
    pin_constants(state->graph->block(), reads);
    return std::make_unique<EmulatedGraph>(batch_size, state->graph, std::move(inputs),
                                           std::move(static_outputs), std::move(reads));
  }

 private:
  CpuMemoryMeter m_meter;
};

}  // namespace

std::unique_ptr<GraphBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

}  // namespace graphcheck
