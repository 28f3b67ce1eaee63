#include "backends/emulated_backend.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/fixup_trace_scope_blocks.h>
#include <torch/csrc/jit/passes/inline_fork_wait.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/normalize_ops.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include "address_index.h"
#include "host_sync_ops.h"
#include "backends/static_copy.h"
#include "counting_allocator.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

thread_local bool t_tracing_forward = false;

// Marks this thread as inside one of the backend's traces (tracing_forward()), nesting.
class TracingForward {
 public:
  TracingForward() : m_was(t_tracing_forward) { t_tracing_forward = true; }
  ~TracingForward() { t_tracing_forward = m_was; }
  TracingForward(const TracingForward&) = delete;
  TracingForward& operator=(const TracingForward&) = delete;

 private:
  bool m_was;
};

// Host syncs (host_sync_ops.h): the tracer bakes their results into the graph as constants, so
// they are seen through RecordFunction instead.

struct HostSyncLog {
  std::vector<std::string> ops;  // "aten::item", or "aten::item (inside aten::index)"
  std::string where;             // the first one's place in a Python forward, "model.py:42"
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

// Whether a Python file is one of the Python front's own modules (graphcheck/_cli.py,
// _model.py, ...): the innermost Python frame of a C++ forward run under `python -m graphcheck`
// is one of them, and names no place in the model.
bool is_front_file(std::string_view file) {
  const std::size_t slash = file.rfind('/');
  if (slash == std::string_view::npos || slash + 1 >= file.size() || file[slash + 1] != '_') return false;
  constexpr std::string_view kPackage = "/graphcheck";
  return slash >= kPackage.size() && file.substr(slash - kPackage.size(), kPackage.size()) == kPackage;
}

// Where a Python forward is now, as "model.py:42": the innermost frame of the tracer's Python
// call stack outside torch's own package; "" for a C++ forward (no stack, or the Python front's
// own frame: `python -m graphcheck` runs C++ fixtures too).
std::string python_source_here() {
  for (const torch::jit::StackEntry& entry : torch::jit::tracer::pythonCallstack()) {
    const std::shared_ptr<torch::jit::Source> source = entry.range.source();
    if (!source || !source->filename()) continue;
    const std::string& file = *source->filename();
    if (file.find("/torch/") != std::string::npos) continue;
    return is_front_file(file) ? std::string() : fmt::format("{}:{}", file, source->starting_line_no());
  }
  return {};
}

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  HostSyncLog* log = t_host_sync_log;
  if (!log) return nullptr;
  const char* name = fn.name();
  const bool top = log->stack.empty();
  if (is_host_sync_op(name)) {
    const std::size_t before = log->ops.size();
    if (top) {
      if (!reads_shape_only(fn)) log->ops.emplace_back(name);  // Note [Shape-derived host reads]
    } else {
      const HostSyncLog::Frame& outer = log->stack.front();
      bool exempt = outer.shape_scalars || reads_shape_only(fn);
      for (const char* op : kCudaNoSyncOps) exempt = exempt || outer.name == op;
      if (!exempt) log->ops.push_back(fmt::format("{} (inside {})", name, outer.name));
    }
    if (before == 0 && !log->ops.empty()) log->where = python_source_here();
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


// Note [Recapture signature]
// What a capture bakes besides addresses, as the recapture comparison sees it: the sequence of the
// trace's ops (prim::Constant nodes aside), and for each op the host values among its inputs:
// every constant that is not a model tensor (numbers, lists, strings, devices, and Python scalars
// the tracer wrapped as tensors). A model tensor is an address, the address probe's business. Two
// traces of one forward agree on this signature unless the forward decided something on the host
// from data: a branch (the op sequence parts) or a value passed to an op (a constant differs),
// however the value reached the host (item(), .cpu(), a raw data_ptr() read, a Python float kept
// on the model).
struct OpSignature {
  std::string kind;
  std::vector<std::pair<int, std::string>> host_values;  // (input position, value)
  std::string source;
};

std::string constant_text(const torch::jit::Node* node) {
  // Without a value: None, or the scripted function a traced call names. FunctionType::str() is
  // "Function" for every function: the constant's name attribute tells them apart.
  if (!node->hasAttribute(c10::attr::value)) {
    if (node->output()->type()->kind() == c10::TypeKind::NoneType) return "None";
    return node->hasAttribute(c10::attr::name) ? node->s(c10::attr::name) : node->output()->type()->str();
  }
  if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) {
    const torch::Tensor t = node->t(c10::attr::value);
    if (!t.defined()) return "None";
    if (!t.unsafeGetTensorImpl()->is_wrapped_number()) return {};  // a model tensor: not a host value
    return fmt::format("{}", t.item().toDouble());
  }
  const c10::IValue v = torch::jit::toIValue(node->output()).value_or(c10::IValue());
  std::ostringstream out;
  out << v;
  return out.str();
}

// "model.py:42" for a node the tracer recorded under a Python forward (the innermost frame outside
// torch's own package), "" otherwise (a C++ forward, run from Python or not: its innermost Python
// frame is the front's own, is_front_file()).
std::string source_of(const torch::jit::Node* node) {
  const torch::jit::SourceRange range = node->sourceRange();
  const std::shared_ptr<torch::jit::Source> source = range.source();
  if (!source || !source->filename()) return {};
  std::istringstream lines(source->text_str().str());
  std::string line, first;
  while (std::getline(lines, line)) {
    const auto paren = line.find("):");
    if (paren == std::string::npos) continue;
    std::string where = line.substr(0, paren);
    const auto open = where.rfind('(');
    if (open == std::string::npos) continue;
    const std::string file = where.substr(0, open);
    where = fmt::format("{}:{}", file, where.substr(open + 1));
    if (file.find("/torch/") != std::string::npos) {
      if (first.empty()) first = where;
      continue;
    }
    return is_front_file(file) ? std::string() : where;
  }
  return first;
}

void collect_signature(const torch::jit::Block* block, std::vector<OpSignature>& out) {
  for (const torch::jit::Node* node : block->nodes()) {
    if (node->kind() == c10::prim::Constant) continue;
    OpSignature op;
    op.kind = node->kind().toQualString();
    const auto inputs = node->inputs();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const torch::jit::Node* producer = inputs[i]->node();
      if (producer->kind() != c10::prim::Constant) continue;
      std::string text = constant_text(producer);
      if (!text.empty()) op.host_values.emplace_back(static_cast<int>(i), std::move(text));
    }
    op.source = source_of(node);
    out.push_back(std::move(op));
    for (const torch::jit::Block* sub : node->blocks()) collect_signature(sub, out);
  }
}

std::vector<OpSignature> signature_of(const torch::jit::Graph& graph) {
  std::vector<OpSignature> out;
  collect_signature(graph.block(), out);
  return out;
}

RecaptureDiff compare_signatures(const std::vector<OpSignature>& captured, const std::vector<OpSignature>& now) {
  RecaptureDiff d;
  d.supported = true;
  const std::size_t n = std::min(captured.size(), now.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (captured[i].kind == now[i].kind) continue;
    d.control_flow_differs = true;
    d.divergence = fmt::format("op {} of the forward: {} at capture, {} now", i + 1, captured[i].kind, now[i].kind);
    d.divergence_source = now[i].source.empty() ? captured[i].source : now[i].source;
    return d;
  }
  if (captured.size() != now.size()) {
    d.control_flow_differs = true;
    const bool longer = now.size() > captured.size();
    const OpSignature& extra = longer ? now[n] : captured[n];
    d.divergence = fmt::format("the forward ran {} ops at capture and {} now; the first {}: {}", captured.size(),
                               now.size(), longer ? "added" : "dropped", extra.kind);
    d.divergence_source = extra.source;
    return d;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto& a = captured[i].host_values;
    const auto& b = now[i].host_values;
    for (std::size_t j = 0; j < a.size() && j < b.size(); ++j) {
      if (a[j] == b[j]) continue;
      BakedValue v;
      v.op = captured[i].kind;
      v.argument = a[j].first;
      v.at_capture = a[j].second;
      v.now = b[j].second;
      v.source = now[i].source;
      d.values.push_back(std::move(v));
    }
  }
  return d;
}

// Note [Pooled constants]: the tracer records every scalar an op is passed as a constant node of
// its own (narrow(w, 0, 0, 8) adds three), so a forward over n tensors holds several constants per
// tensor, twice (the graph and the interpreter's Code): 330 MB of resident memory for two batch
// sizes of a synthetic model of 10,000 tensors (and 640 KB of weights), 160 MB pooled. Constants
// of equal type and bits share one node at the head of the graph. (Dropping the graph once Code
// holds its copy saved a little more but made every pass that captures 25% slower.) Model
// tensors (each its own address) and the tracer's wrapped numbers keep their nodes; a constant
// that is not a plain scalar, string, device or list of them is left as it is. Op order, and so
// the recapture signature (which skips constants), is unchanged.
std::optional<std::string> pool_key(const torch::jit::Node* node) {
  // A constant without a value is None, or a function a traced call of a scripted function
  // names (prim::CallFunction's first input, of FunctionType): that one is left as it is.
  if (!node->hasAttribute(c10::attr::value)) {
    if (node->output()->type()->kind() != c10::TypeKind::NoneType) return std::nullopt;
    return "None";
  }
  if (node->kindOf(c10::attr::value) == torch::jit::AttributeKind::t) return std::nullopt;
  const auto value = torch::jit::toIValue(node->output());
  if (!value) return std::nullopt;
  const auto bits = [](double d) {
    std::uint64_t u = 0;
    std::memcpy(&u, &d, sizeof(u));
    return u;
  };
  std::string key = node->output()->type()->str() + "|";
  if (value->isNone()) return key + "None";
  if (value->isBool()) return key + (value->toBool() ? "1" : "0");
  if (value->isInt()) return key + std::to_string(value->toInt());
  if (value->isDouble()) return key + std::to_string(bits(value->toDouble()));
  if (value->isString()) return key + value->toStringRef();
  if (value->isDevice()) return key + value->toDevice().str();
  if (value->isIntList()) return key + fmt::format("{}", fmt::join(value->toIntVector(), ","));
  if (value->isBoolList()) {
    for (bool b : value->toBoolList()) key += b ? '1' : '0';
    return key;
  }
  if (value->isDoubleList()) {
    for (double d : value->toDoubleVector()) key += std::to_string(bits(d)) + ",";
    return key;
  }
  return std::nullopt;
}

void pool_constants(torch::jit::Graph& graph) {
  std::map<std::string, torch::jit::Value*> pooled;
  torch::jit::Node* head = nullptr;  // the pooled constants lie before the first other node
  for (auto it = graph.block()->nodes().begin(); it != graph.block()->nodes().end();) {
    torch::jit::Node* node = *it;
    ++it;
    if (node->kind() != c10::prim::Constant || node->outputs().size() != 1) continue;
    const std::optional<std::string> key = pool_key(node);
    if (!key) continue;
    const auto [at, fresh] = pooled.try_emplace(*key, node->output());
    if (fresh) {
      torch::jit::Node* front = graph.block()->nodes().front();
      if (head == nullptr) {
        if (node != front) node->moveBefore(front);
      } else if (node->prev() != head) {
        node->moveAfter(head);
      }
      head = node;
      continue;
    }
    node->output()->replaceAllUsesWith(at->second);
    node->destroy();
  }
}

class EmulatedGraph final : public CapturedGraph {
 public:
  EmulatedGraph(std::int64_t batch_size, const std::shared_ptr<torch::jit::Graph>& graph,
                TensorList inputs, TensorList outputs, std::vector<GraphRead> reads)
      : m_batch_size(batch_size),
        m_code(std::make_unique<torch::jit::Code>(graph, fmt::format("graphcheck_emulated_bs{}", batch_size))),
        m_inputs(std::move(inputs)),
        m_outputs(std::move(outputs)),
        m_reads(std::move(reads)),
        m_signature(signature_of(*graph)) {}
  ~EmulatedGraph() override {
    with_host_lock([&] { m_code.reset(); });  // Note [Foreign objects in traced graphs]
  }
  EmulatedGraph(const EmulatedGraph&) = delete;
  EmulatedGraph& operator=(const EmulatedGraph&) = delete;

  [[nodiscard]] std::int64_t batch_size() const override { return m_batch_size; }
  [[nodiscard]] const TensorList& static_inputs() const override { return m_inputs; }
  [[nodiscard]] const TensorList& static_outputs() const override { return m_outputs; }
  [[nodiscard]] const std::vector<GraphRead>& reads() const override { return m_reads; }
  [[nodiscard]] const std::vector<OpSignature>& signature() const { return m_signature; }

  void replay() override {
    torch::NoGradGuard no_grad;
    torch::jit::Stack stack(m_inputs.begin(), m_inputs.end());
    torch::jit::InterpreterState(*m_code).run(stack);
    TORCH_CHECK(stack.size() == m_outputs.size(), "graphcheck: the captured forward returned ",
                stack.size(), " values, captured with ", m_outputs.size());
    // The static output buffers keep their addresses, as with a CUDA graph.
    for (std::size_t i = 0; i < stack.size(); ++i) {
      TORCH_CHECK(stack[i].isTensor(), "graphcheck: output ", i, " of the replay is not a tensor");
      copy_static(m_outputs[i], stack[i].toTensor());
    }
  }

 private:
  std::int64_t m_batch_size;
  // Not the traced graph itself: the interpreter's code holds its own copy of it, and a second
  // copy of a graph with a node per tensor is tens of MB at 10,000 tensors (issue 26).
  std::unique_ptr<torch::jit::Code> m_code;
  TensorList m_inputs;
  TensorList m_outputs;
  std::vector<GraphRead> m_reads;
  std::vector<OpSignature> m_signature;  // Note [Recapture signature], taken at capture
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
  [[nodiscard]] std::vector<Block> blocks_alive_since(std::uint64_t moment) const override {
    std::vector<Block> out;
    for (const auto& [address, bytes] : CountingCpuAllocator::instance().blocks_alive_since(moment)) {
      out.push_back({address, bytes});
    }
    return out;
  }
};

class EmulatedBackend final : public GraphBackend {
 public:
  [[nodiscard]] std::string name() const override { return "emulated"; }
  [[nodiscard]] bool exact() const override { return true; }
  [[nodiscard]] double min_tolerance() const override { return 0.0; }
  [[nodiscard]] bool keeps_storages_alive() const override { return true; }
  [[nodiscard]] MemoryMeter& memory_meter() override { return m_meter; }
  void synchronize() override {}
  [[nodiscard]] bool records_forwards() const override { return true; }

  std::unique_ptr<CapturedGraph> capture(LifecycleModel& model, const TensorList& example_inputs,
                                         std::int64_t batch_size) override {
    torch::NoGradGuard no_grad;
    TensorList inputs;
    for (const auto& t : example_inputs) inputs.push_back(t.clone());
    std::unique_ptr<CapturedGraph> graph;
    with_host_lock([&] {  // Note [Foreign objects in traced graphs]: the trace dies in here
      Trace trace = trace_forward(model, inputs, batch_size);
      TensorList static_outputs;
      for (auto& v : trace.outputs) static_outputs.push_back(v.toTensor().clone());
      std::vector<GraphRead> reads;
      pin_constants(trace.state->graph->block(), reads);
      pool_constants(*trace.state->graph);
      graph = std::make_unique<EmulatedGraph>(batch_size, trace.state->graph, std::move(inputs),
                                              std::move(static_outputs), std::move(reads));
    });
    return graph;
  }

  // Note [Recapture signature]: a fresh trace on `inputs`, its signature against the capture's.
  RecaptureDiff recapture_diff(const CapturedGraph& graph, LifecycleModel& model, const TensorList& inputs) override {
    const auto* emulated = dynamic_cast<const EmulatedGraph*>(&graph);
    if (!emulated) {
      RecaptureDiff d;
      d.unsupported_reason = "the graph is not the emulated backend's";
      return d;
    }
    torch::NoGradGuard no_grad;
    TensorList copies;
    for (const auto& t : inputs) copies.push_back(t.clone());
    try {
      RecaptureDiff d;
      with_host_lock([&] {  // Note [Foreign objects in traced graphs]
        const Trace trace = trace_forward(model, copies, graph.batch_size());
        d = compare_signatures(emulated->signature(), signature_of(*trace.state->graph));
      });
      return d;
    } catch (const BackendLimit& e) {
      // A call the trace cannot record on these inputs only: the recording is a diagnostic.
      RecaptureDiff d;
      d.unsupported_reason = e.what();
      return d;
    } catch (const NotCapturable& e) {
      // A host sync on these inputs that the capture did not meet: the forward took another path.
      RecaptureDiff d;
      d.supported = true;
      d.control_flow_differs = true;
      d.divergence = e.what();
      return d;
    }
  }

 private:
  struct Trace {
    std::shared_ptr<torch::jit::tracer::TracingState> state;
    torch::jit::Stack outputs;
  };
  // Note [Lean trace epilogue]: torch::jit::tracer::trace() without the part of its epilogue that
  // changes nothing. After the forward, trace() inlines calls of scripted functions (in inline-
  // everything mode), then FixupTraceScopeBlocks, which for a trace made without a module inlines
  // scope blocks, lifts forked closures, lowers tuples (and eliminates dead code with them),
  // eliminates dead code a second time and lints the whole graph, then NormalizeOps. On the
  // synthetic 10,000-tensor model that epilogue was half of each capture and of each fresh
  // recording of the validate pass (perf: the lint a fifth, the two dead code eliminations, with
  // the alias analysis each builds, a third). The lint checks libtorch's own invariants, and the
  // second elimination finds nothing the first left. Nor does the first where every node has an
  // output in use: the last dead node in graph order would have none. So a graph that holds none
  // of the nodes the fixup exists for (scope blocks, forks, attribute reads: Python's module
  // tracing and torch.jit.fork make them) gets its calls inlined, its tuples lowered where it has
  // some, its dead code eliminated once where it can have some, and its ops normalised: the graph
  // trace() leaves. Any other goes through libtorch's own FixupTraceScopeBlocks. The prologue is
  // trace()'s for tensor inputs.
  static std::pair<std::shared_ptr<torch::jit::tracer::TracingState>, torch::jit::Stack> lean_trace(
      torch::jit::Stack inputs, const std::function<torch::jit::Stack(torch::jit::Stack)>& traced) {
    namespace tracer = torch::jit::tracer;
    TORCH_CHECK(!tracer::isTracing(), "Tracing can't be nested");  // as trace() refuses it
    auto state = std::make_shared<tracer::TracingState>();
    tracer::setTracingState(state);
    try {
      for (torch::jit::IValue& input : inputs) {
        torch::jit::Value* value = state->graph->addInput();
        torch::Tensor t = input.toTensor();
        if (state->hasValue(input)) t = t.view(t.sizes().vec());  // the same tensor passed twice
        state->setValue(t, value);
        input = t;
      }
      state->strict = true;
      state->force_outplace = false;
      torch::jit::Stack outputs = traced(inputs);
      std::size_t i = 0;
      for (const torch::jit::IValue& output : outputs) {
        state->graph->registerOutput(state->getOutput(output, outputs.size() - i));
        ++i;
      }
      tracer::setTracingState(nullptr);
      std::shared_ptr<torch::jit::Graph> graph = state->graph;
      // Calls of scripted functions the forward made, inlined as trace() inlines them.
      if (torch::jit::getInlineEverythingMode()) torch::jit::Inline(*graph);
      bool plain = true;
      bool tuples = false;
      bool unused = false;  // a node none of whose outputs is used
      for (const torch::jit::Node* node : graph->nodes()) {
        const c10::Symbol kind = node->kind();
        // prim::fork (a scripted function's, inlined) holds a subgraph whose unused inputs dead
        // code elimination removes even where no node is dead.
        if (kind == c10::prim::TracedModuleForward || kind == c10::prim::TracedFork ||
            kind == c10::prim::TracedAttr || kind == c10::prim::fork || !node->blocks().empty()) {
          plain = false;
          break;
        }
        tuples = tuples || kind == c10::prim::TupleConstruct || kind == c10::prim::TupleUnpack ||
                 kind == c10::prim::TupleIndex || kind == c10::prim::TupleSlice;
        unused = unused || std::none_of(node->outputs().begin(), node->outputs().end(),
                                        [](const torch::jit::Value* v) { return v->hasUses(); });
      }
      if (!plain) {
        torch::jit::FixupTraceScopeBlocks(graph, nullptr);
        // Note [Forks run inline]: the interpreter runs a prim::fork on the inter-op pool, so a
        // replay's allocations would outlive it or not depending on that thread (a flaky memory
        // finding on a model with no leak). Eager torch.jit.fork runs the function at once; the
        // replay does the same.
        torch::jit::InlineForkWait(graph);
      } else if (tuples) {
        torch::jit::LowerSimpleTuples(graph);  // eliminates dead code too
      } else if (unused) {
        torch::jit::EliminateDeadCode(graph);
      }
      torch::jit::NormalizeOps(graph);
      return {state, std::move(outputs)};
    } catch (...) {
      tracer::abandon();
      throw;
    }
  }

  // Note [Scripted module calls]: the tracer records a call of a TorchScript module
  // (torch.jit.script(m), a torch::jit::Module) only inside a trace of a module that owns it,
  // whose graph takes the module as its first input and reads weights through it at run time.
  // The emulated backend traces the forward as a function of its inputs, so that every tensor the
  // graph reads is the address the capture saw, as in a CUDA graph; torch refuses the call
  // ("Tried to trace <...> but it is not part of the active trace"). A CUDA graph captures such a
  // forward, so that is the backend's limit, not the model's bug: an error that says which
  // backend to use. A scripted *function* traces (a prim::CallFunction node, run by the
  // interpreter on replay).
  static void refuse_scripted_module_call(const std::exception& e) {
    const std::string text = e.what();
    const std::string marker = "but it is not part of the active trace";
    if (text.find(marker) == std::string::npos) return;
    // "Tried to trace <__torch__.Gate object at 0x...> but ...": the class, not the address.
    std::string module = "a TorchScript module";
    const std::size_t open = text.find("Tried to trace <");
    const std::size_t close = open == std::string::npos ? open : text.find(" object at ", open);
    if (close != std::string::npos && close < text.find(marker, open)) {
      const std::string cls = text.substr(open + 16, close - open - 16);
      // A custom class of torch (a c10d ProcessGroup, packed quantized weights) is no module the
      // user scripted: the tracer's own limit, left as the model failure it was.
      if (cls.rfind("__torch__.torch.classes.", 0) == 0) return;
      module = fmt::format("a TorchScript module of class {}", cls);
    }
    throw BackendLimit(fmt::format(
        "the emulated backend cannot capture this forward: it calls {} (torch.jit.script of a "
        "module, or a torch::jit::Module), and torch's tracer records such a call only in a trace "
        "of the module that owns it, while the emulated backend traces the forward as a function "
        "of its inputs. A CUDA graph captures it: check this model with --backend cuda on a GPU, "
        "or with that submodule left unscripted (its Python forward is captured like the rest)",
        module));
  }

  // Note [Shapes are tensors under the tracer]: under torch.jit's tracer a Python `x.shape[i]`
  // is a 0-dim tensor, so a forward that passes a value derived from a shape where an op takes a
  // plain bool, int or float (`is_causal=seq_len > 1` to scaled_dot_product_attention) fails
  // with a TypeError ("argument 'is_causal' must be bool, not Tensor") that eager never raises.
  // A CUDA graph captures that forward: the backend's limit, told as such, with the two ways on.
  static void refuse_shape_argument(const std::exception& e) {
    const std::string text = e.what();
    const std::size_t at = text.find("argument '");
    const std::size_t tail = text.find(", not Tensor", at == std::string::npos ? 0 : at);
    if (at == std::string::npos || tail == std::string::npos || text.find(" must be ", at) > tail) return;
    const std::size_t line_start = text.rfind('\n', at);
    const std::size_t from = line_start == std::string::npos ? 0 : line_start + 1;
    const std::string what = text.substr(from, tail + 12 - from);  // "TypeError: op(): argument 'x' must be bool, not Tensor"
    throw BackendLimit(fmt::format(
        "the emulated backend cannot capture this forward: {} (under torch.jit's tracer, which "
        "the emulated backend captures with, x.shape[i] is a 0-dim tensor, and a value computed "
        "from it went where the op takes a plain number or bool; eager runs it). A CUDA graph "
        "captures it: check this model with --backend cuda on a GPU, or convert that value "
        "(bool(...), int(...): a shape read back is no host sync here)",
        what));
  }

  static Trace trace_forward(LifecycleModel& model, const TensorList& inputs, std::int64_t batch_size) {
    torch::jit::Stack stack(inputs.begin(), inputs.end());
    HostSyncLog host_syncs;
    Trace trace;
    {
      HostSyncObserver observer(host_syncs);
      auto traced = [&model](torch::jit::Stack in) -> torch::jit::Stack {
        TensorList args;
        for (auto& v : in) args.push_back(v.toTensor());
        TensorList out = model.forward_all(args);
        return torch::jit::Stack(out.begin(), out.end());
      };
      try {
        const TracingForward tracing;  // Note [Source of traced ops]
        std::tie(trace.state, trace.outputs) = lean_trace(std::move(stack), traced);
      } catch (const std::exception& e) {
        refuse_scripted_module_call(e);
        refuse_shape_argument(e);
        throw;
      }
    }
    if (!host_syncs.ops.empty()) {
      throw NotCapturable(fmt::format(
          "forward calls {}{} at batch size {}: a host sync, which a CUDA graph cannot capture "
          "(the value would be frozen at capture time); keep the value on the device",
          host_syncs.ops.front(), host_syncs.where.empty() ? "" : fmt::format(" ({})", host_syncs.where),
          batch_size));
    }
    if (trace.outputs.empty()) throw NotCapturable("forward must return at least one tensor to be captured");
    for (auto& v : trace.outputs) {
      if (!v.isTensor()) throw NotCapturable("every output of a captured forward must be a tensor");
    }
    return trace;
  }

  CpuMemoryMeter m_meter;
};

}  // namespace

std::unique_ptr<GraphBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

std::string python_source_now() { return python_source_here(); }

namespace {
HostLock& host_lock() {
  static HostLock lock;
  return lock;
}
}  // namespace

void set_host_lock(HostLock lock) { host_lock() = std::move(lock); }

bool tracing_forward() { return t_tracing_forward; }

void with_host_lock(const std::function<void()>& fn) {
  const HostLock& lock = host_lock();
  if (lock) {
    lock(fn);
  } else {
    fn();
  }
}

}  // namespace graphcheck
