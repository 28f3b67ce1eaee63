#include "backends/emulated_backend.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/intrusive_ptr.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <iterator>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "address_index.h"
#include "backends/static_copy.h"
#include "counting_allocator.h"
#include "host_memory_use.h"
#include "host_sync_ops.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

thread_local bool t_tracing_forward = false;

// Marks this thread as inside one of the backend's recordings (tracing_forward()), nesting.
class TracingForward {
 public:
  TracingForward() : m_was(t_tracing_forward) { t_tracing_forward = true; }
  ~TracingForward() { t_tracing_forward = m_was; }
  TracingForward(const TracingForward&) = delete;
  TracingForward& operator=(const TracingForward&) = delete;

 private:
  bool m_was;
};

SourceHook& source_hook() {
  static SourceHook hook;
  return hook;
}

// Whether a Python file is one of the Python front's own modules (graphcheck/_cli.py,
// _model.py, ...): the innermost Python frame of a C++ forward run under `python -m graphcheck`
// is one of them, and names no place in the model.
bool is_front_file(std::string_view file) {
  const std::size_t slash = file.rfind('/');
  if (slash == std::string_view::npos || slash + 1 >= file.size() || file[slash + 1] != '_') return false;
  constexpr std::string_view kPackage = "/graphcheck";
  return slash >= kPackage.size() && file.substr(slash - kPackage.size(), kPackage.size()) == kPackage;
}

// Host syncs (host_sync_ops.h), seen through RecordFunction: the recording holds what they return
// as host values, so a capture that met one is refused.

struct HostSyncLog {
  std::vector<std::string> ops;  // "aten::item", or "aten::item (inside aten::index)"
  std::string where;             // the first one's place in a Python forward, "model.py:42"
  // The ops of the forward's own calls (not those aten ops make inside), innermost last.
  std::vector<std::string> stack;
};
thread_local HostSyncLog* t_host_sync_log = nullptr;

// Ops whose CPU kernels read a value back to the host where the CUDA kernel reads nothing (the
// host read is the CPU implementation's, not the model's): their nested host syncs are no
// capture problem.
constexpr const char* kCudaNoSyncOps[] = {"aten::_grouped_mm"};

std::unique_ptr<at::ObserverContext> on_op_enter(const at::RecordFunction& fn) {
  HostSyncLog* log = t_host_sync_log;
  if (!log) return nullptr;
  const char* name = fn.name();
  if (is_host_sync_op(name)) {
    const std::size_t before = log->ops.size();
    if (log->stack.empty()) {
      log->ops.emplace_back(name);
    } else {
      const std::string& outer = log->stack.front();
      bool exempt = false;
      for (const char* op : kCudaNoSyncOps) exempt = exempt || outer == op;
      if (!exempt) log->ops.push_back(fmt::format("{} (inside {})", name, outer));
    }
    if (before == 0 && !log->ops.empty()) log->where = python_source_now();
  }
  log->stack.emplace_back(name);
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
            at::RecordFunctionCallback(&on_op_enter, &on_op_exit).scopes({at::RecordScope::FUNCTION}))) {
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

// Note [Recorded forwards]
// Capture records the forward as the ops it calls at the top level (its own calls, not the ops
// those make inside), in order, each with its arguments. A tensor argument is a value of the
// graph: one of its inputs, what an op recorded before it returned (or a tensor made with no op
// over memory such an op allocated, `.data`, recorded as a view of it), or a tensor made outside
// the forward (a weight, a buffer, a cache, a view of one), a constant pinned to its storage
// (Note [Pinned constants]). Every
// other argument (a number, a list of sizes, a Python scalar wrapped as a tensor, a dtype) is a
// host value, baked in as it was. Replay calls the same ops through the dispatcher on this
// replay's values, and drops each value after its last use: what a CUDA graph's kernels do with
// the pointers and scalars baked into their parameters.
// The ops come from at::RecordFunction, which sees every dispatcher call on this thread: a
// TorchScript function's or module's (whose boxed calls pass the interpreter's whole stack: an
// op's arguments are its last entries), a custom op's. A region that is no op (an autograd
// Function's apply) is transparent, and an op that throws (inside a try the forward catches)
// returned nothing and is left out. Two kinds of tensor are the graph's own memory, as a CUDA
// graph's pool is: the outputs of the forward's own calls of aten::empty and its kin, and tensors
// made by code that asks not to be traced (at::tracer::impl::NoTracerDispatchMode: torch.tensor()
// in Python fills one from host data with raw writes, which no op records; torch::tensor() in C++
// writes into an aten::empty the same way). Replay reuses them, as a CUDA graph reuses the
// addresses its capture allocated: each through an alias of the graph's own, which starts every
// replay with the sizes it was made with (an unsqueeze_ at capture runs again at replay). It
// copies in again the bytes the host wrote into them, as the first op to read them saw them (a
// CUDA graph's memcpy node); a view of them is no read yet, and an op that overwrites them first
// (an out= buffer, fill_, copy_) leaves nothing to copy. What a replay could not repeat ends
// the capture as the backend's limit (BackendLimit), never as a replay that differs: a mode the
// forward switches on around an op (torch.autocast, a TorchDispatchMode, torch.func), or a
// recording that failed part-way (RecordFunction would swallow the error). Not seen: ops a forward
// runs on another thread (a fork inside scripted code runs on the inter-op pool).
// Before, capture traced the forward with torch.jit's tracer (deprecated since PyTorch 2.11) and
// replayed it with the TorchScript interpreter: 0.85 s per capture of the synthetic 10,000-tensor
// model, whose eager forward takes 0.025 s, most of it the tracer's graph and the interpreter's
// code built from it; a scripted module could not be captured at all, and a Python shape was a
// 0-dim tensor that ops taking a number refused.

// How one argument (or return) of a recorded op is made from a replay's values.
struct ValueTree {
  enum class Kind : std::uint8_t { kHost, kTensor, kTensorList, kList, kTuple };
  Kind kind = Kind::kHost;
  std::int32_t slot = -1;       // kTensor: the value
  c10::IValue host;             // kHost: the value as passed; kList: an empty list of its type
  std::vector<ValueTree> items;  // kTensorList, kList, kTuple
};

struct RecordedOp {
  std::optional<c10::OperatorHandle> op;  // always set (OperatorHandle has no default)
  bool runs = true;  // false: aten::empty and its kin, whose outputs are the graph's own memory
  std::vector<ValueTree> arguments;
  std::vector<ValueTree> returns;
  std::vector<std::int32_t> release;  // the values whose last use this op is
  const std::string* source = nullptr;  // "model.py:42" (interned), or none
};

struct Recording {
  std::vector<RecordedOp> ops;
  std::int32_t inputs = 0;  // values 0..inputs-1
  // Per value: defined for a constant (pinned after the recording) and for the graph's own memory;
  // undefined for an input and for what an op returns.
  std::vector<at::Tensor> initial;
  std::vector<bool> own;  // per value: the graph's own memory (no read of the graph)
  // Own memory the host wrote (torch.tensor(...)), as the forward's first op read it: the bytes of
  // its storage, copied back at the start of every replay, as a CUDA graph's memcpy node copies a
  // host value in. The op and argument that first read it name it (Note [Recapture signature]).
  struct HostWrite {
    std::int32_t slot = -1;
    std::size_t op = 0;
    int argument = 0;
    std::vector<char> bytes;
  };
  std::vector<HostWrite> host_writes;
  // Per own value: its sizes, strides and offset when it was made. Replay starts each from them
  // (an op that resizes it, or unsqueeze_, changed them at capture and would again).
  struct Layout {
    std::vector<std::int64_t> sizes, strides;
    std::int64_t offset = 0;
  };
  std::unordered_map<std::int32_t, Layout> own_layouts;
  std::vector<ValueTree> outputs;
  std::vector<GraphRead> reads;
};

// Interned places, so that a recording holds a pointer per op, not a string.
const std::string* intern_source(std::string where) {
  if (where.empty()) return nullptr;
  static std::mutex mutex;
  static std::unordered_set<std::string> places;
  const std::lock_guard<std::mutex> lock(mutex);
  return &*places.insert(std::move(where)).first;
}

class Recorder;
thread_local Recorder* t_recorder = nullptr;

class Recorder {
 public:
  explicit Recorder(Recording& out) : m_out(out), m_modes(modes_now()) {}

  // What the recording met that replay could not repeat, or "": the capture is refused with it.
  [[nodiscard]] const std::string& limit() const { return m_limit; }

  void add_input(const at::Tensor& t) {
    const std::int32_t slot = fresh_value();
    remember(t, slot);
    ++m_out.inputs;
  }

  // RecordFunction swallows what a callback throws: a recording that failed here says so (the
  // capture is refused with it) rather than keep an op recorded in part.
  void enter(const at::RecordFunction& fn) {
    const std::optional<c10::OperatorName> name = fn.operator_name();
    if (!name) return;  // no op: transparent
    if (m_depth++ > 0) return;
    try {
      enter_top(fn, *name);
    } catch (const std::exception& e) {
      limit(fmt::format("recording {} failed: {}", fn.name(), e.what()));
      m_pending.reset();
      m_host.threw();
    }
  }

  void enter_top(const at::RecordFunction& fn, const c10::OperatorName& name) {
    m_unwinding = std::uncaught_exceptions();
    m_skipping = c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Tracer);
    if (m_skipping) return;
    std::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op) {  // an op of the TorchScript interpreter's own, not the dispatcher's: transparent
      --m_depth;
      return;
    }
    RecordedOp& r = m_pending.emplace();
    r.op = std::move(op);
    r.runs = !returns_uninitialised(fn.name(), name.overload_name);
    // A boxed call (the TorchScript interpreter's) passes its whole stack: the op's arguments are
    // its last ones.
    const c10::FunctionSchema& schema = r.op->schema();
    auto inputs = fn.inputs();
    const std::size_t arguments = schema.arguments().size();
    if (inputs.size() < arguments) {
      limit(fmt::format("{} was recorded with {} of its {} arguments", fn.name(), inputs.size(), arguments));
    } else {
      inputs = inputs.slice(inputs.size() - arguments);
    }
    // A mode the forward switched on or off around the op (torch.autocast, a TorchDispatchMode,
    // functionalization): it hangs on thread-local state that replay would not have.
    bool switched_on = false;
    if (const std::string mode = mode_change(switched_on); !mode.empty()) {
      limit(fmt::format("{} runs {} {}, which the forward switched {} around it, and replay would not "
                        "run it so",
                        fn.name(), switched_on ? "under" : "without", mode, switched_on ? "on" : "off"));
    }
    r.arguments.reserve(inputs.size());
    m_argument_storages.clear();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      r.arguments.push_back(argument(inputs[i]));
      for_each_tensor_in(inputs[i], [&](const at::Tensor& t) {
        if (t.has_storage()) m_argument_storages.push_back(t.storage().unsafeGetStorageImpl());
        if (r.runs) m_host.meet(*r.op, schema.arguments()[i], i, t);
      });
    }
    try {
      r.source = intern_source(python_source_now());
    } catch (...) {
      // The place is a detail: the op stands without it.
    }
  }

  void exit(const at::RecordFunction& fn) {
    if (m_depth == 0 || !fn.operator_name()) return;
    if (--m_depth > 0) return;
    try {
      exit_top(fn);
    } catch (const std::exception& e) {
      limit(fmt::format("recording {} failed: {}", fn.name(), e.what()));
      m_pending.reset();
      m_host.threw();
      m_skipping = false;
    }
  }

  void exit_top(const at::RecordFunction& fn) {
    if (std::uncaught_exceptions() > m_unwinding) {
      // The op threw (and the forward may catch it): it returned nothing, and replay must not run it.
      m_skipping = false;
      m_pending.reset();
      m_host.threw();
      return;
    }
    if (m_skipping) {  // what it made from host data is the graph's own memory
      m_skipping = false;
      for (const c10::IValue& v : fn.outputs()) returned(v, /*runs=*/false, /*host_code=*/true);
      return;
    }
    if (!m_pending) return;
    RecordedOp r = std::move(*m_pending);
    m_pending.reset();
    const std::size_t returns = r.op->schema().returns().size();
    const std::vector<c10::IValue>& outputs = fn.outputs();
    if (outputs.size() < returns) {
      limit(fmt::format("{} was recorded with {} of its {} results", fn.name(), outputs.size(), returns));
    }
    for (std::size_t i = outputs.size() - std::min(outputs.size(), returns); i < outputs.size(); ++i) {
      r.returns.push_back(returned(outputs[i], r.runs));
    }
    // Own memory this op read first: its bytes as the op found them (Recording::host_writes).
    const std::size_t index = m_out.ops.size();
    const c10::ArrayRef<c10::IValue> results =
        c10::ArrayRef<c10::IValue>(outputs).slice(outputs.size() - std::min(outputs.size(), returns));
    m_host.returned(results, [&](const HostMemory::FirstRead& f) {
      m_out.host_writes.push_back({f.slot, index, f.argument, std::move(*f.bytes)});
    });
    m_out.ops.push_back(std::move(r));
  }

  void add_output(const at::Tensor& t) { m_out.outputs.push_back(argument(t)); }

 private:
  struct Known {
    c10::weak_intrusive_ptr<c10::TensorImpl> keep;  // the impl's address is not reused meanwhile
    std::int32_t slot = -1;
  };

  void limit(std::string what) {
    if (m_limit.empty()) m_limit = std::move(what);
  }

  // The modes on now, among those that change what an op computes: a bit each (kModes).
  static constexpr const char* kModes[] = {"torch.autocast", "torch.autocast(cuda)", "a TorchDispatchMode",
                                           "functionalization", "torch.func (vmap, grad)"};
  static unsigned modes_now() {
    using c10::DispatchKey;
    const c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();  // one read
    unsigned on = 0;
    if (!keys.excluded_.has(DispatchKey::AutocastCPU)) on |= 1U;
    if (!keys.excluded_.has(DispatchKey::AutocastCUDA)) on |= 2U;
    if (keys.included_.has(DispatchKey::Python) || keys.included_.has(DispatchKey::PythonTLSSnapshot)) on |= 4U;
    if (keys.included_.has(DispatchKey::Functionalize)) on |= 8U;
    if (keys.included_.has(DispatchKey::FuncTorchDynamicLayerFrontMode) || keys.included_.has(DispatchKey::PythonDispatcher)) {
      on |= 16U;
    }
    return on;
  }

  // The first mode switched on or off since the recording began, and which; "" for none.
  std::string mode_change(bool& switched_on) const {
    const unsigned changed = modes_now() ^ m_modes;
    for (unsigned bit = 0; bit < std::size(kModes); ++bit) {
      if ((changed >> bit) & 1U) {
        switched_on = ((m_modes >> bit) & 1U) == 0;
        return kModes[bit];
      }
    }
    return {};
  }

  void remember(const at::Tensor& t, std::int32_t slot) {
    m_index.insert_or_assign(t.unsafeGetTensorImpl(),
                             Known{c10::weak_intrusive_ptr<c10::TensorImpl>(t.getIntrusivePtr()), slot});
  }

  std::int32_t fresh_value() {
    m_out.initial.emplace_back();
    m_out.own.push_back(false);
    return static_cast<std::int32_t>(m_out.initial.size() - 1);
  }

  // The value a tensor argument is: a known one, or a constant (made outside the recorded ops).
  std::int32_t value_of(const at::Tensor& t) {
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (const auto it = m_index.find(impl); it != m_index.end()) return it->second.slot;
    if (const std::optional<std::int32_t> alias = alias_of_made(t)) return *alias;
    const std::int32_t slot = fresh_value();
    m_out.initial[static_cast<std::size_t>(slot)] = t;
    // Another tensor over the graph's own memory (a shallow copy: autograd::make_variable() makes
    // one of a tensor something else still holds, as this recording holds aten::empty's) is too.
    m_out.own[static_cast<std::size_t>(slot)] = t.has_storage() && m_own_storages.count(t.storage().unsafeGetStorageImpl()) > 0;
    if (m_out.own[static_cast<std::size_t>(slot)]) keep_layout(t, slot);
    remember(t, slot);
    return slot;
  }

  void keep_layout(const at::Tensor& t, std::int32_t slot) {
    m_out.own_layouts[slot] = {t.sizes().vec(), t.strides().vec(), t.storage_offset()};
  }

  // Memory an op returned: a new value's (not the memory of one of its arguments, a weight's or a
  // cache's, which an in-place op or a view returns), or an existing value's seen as another dtype.
  void made(const at::Tensor& t, std::int32_t slot) {
    c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
    if (m_own_storages.count(storage)) return;
    auto it = m_made_storages.find(storage);
    if (it == m_made_storages.end()) {
      if (std::find(m_argument_storages.begin(), m_argument_storages.end(), storage) != m_argument_storages.end()) {
        return;
      }
      it = m_made_storages
               .emplace(storage, Made{c10::weak_intrusive_ptr<c10::StorageImpl>(
                                          c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)),
                                      {}})
               .first;
    }
    for (const auto& [dtype, base] : it->second.bases) {
      if (dtype == t.scalar_type()) return;
    }
    it->second.bases.emplace_back(t.scalar_type(), slot);
  }

  // A tensor no recorded op returned over memory one did (`.data`, a shallow copy made with no
  // op): the same view of that value at replay, recorded as aten::as_strided of it.
  std::optional<std::int32_t> alias_of_made(const at::Tensor& t) {
    if (!t.has_storage()) return std::nullopt;
    const auto it = m_made_storages.find(t.storage().unsafeGetStorageImpl());
    if (it == m_made_storages.end()) return std::nullopt;
    std::int32_t base = -1;
    for (const auto& [dtype, slot] : it->second.bases) {
      if (dtype == t.scalar_type()) base = slot;
    }
    if (base < 0) {
      limit(fmt::format("a tensor the forward made with no op views memory an op returned as another dtype ({})",
                        c10::toString(t.scalar_type())));
      return std::nullopt;
    }
    static const c10::OperatorHandle as_strided = c10::Dispatcher::singleton().findSchemaOrThrow("aten::as_strided", "");
    RecordedOp op;
    op.op = as_strided;
    ValueTree from;
    from.kind = ValueTree::Kind::kTensor;
    from.slot = base;
    op.arguments.push_back(std::move(from));
    ValueTree sizes, strides, offset;
    sizes.host = c10::IValue(t.sizes().vec());
    strides.host = c10::IValue(t.strides().vec());
    offset.host = c10::IValue(t.storage_offset());
    op.arguments.push_back(std::move(sizes));
    op.arguments.push_back(std::move(strides));
    op.arguments.push_back(std::move(offset));
    ValueTree out;
    out.kind = ValueTree::Kind::kTensor;
    out.slot = fresh_value();
    op.returns.push_back(out);
    remember(t, out.slot);
    m_out.ops.push_back(std::move(op));
    return out.slot;
  }

  ValueTree argument(const c10::IValue& v) {
    ValueTree tree;
    if (v.isTensor()) {
      if (!v.toTensor().defined()) {
        tree.host = v;
        return tree;
      }
      tree.kind = ValueTree::Kind::kTensor;
      tree.slot = value_of(v.toTensor());
      return tree;
    }
    if (v.isTensorList()) {
      tree.kind = ValueTree::Kind::kTensorList;
      for (const at::Tensor& t : v.toTensorList().vec()) tree.items.push_back(argument(t));
      return tree;
    }
    if (v.isList() || v.isTuple()) {
      const auto& elements = v.isList() ? v.toListRef() : v.toTupleRef().elements();
      bool tensors = false;
      for (const c10::IValue& e : elements) {
        tree.items.push_back(argument(e));
        tensors = tensors || tree.items.back().kind != ValueTree::Kind::kHost;
      }
      if (!tensors) {
        tree.items.clear();
        tree.host = v;
        return tree;
      }
      tree.kind = v.isList() ? ValueTree::Kind::kList : ValueTree::Kind::kTuple;
      if (v.isList()) tree.host = c10::impl::GenericList(v.toList().elementType());
      return tree;
    }
    tree.host = v;
    return tree;
  }

  // A returned tensor is a new value, or (aten::empty and its kin) the graph's own memory.
  // `host_code`: code that builds a tensor from host data returned it (the tracer's key excluded).
  ValueTree returned(const c10::IValue& v, bool runs, bool host_code = false) {
    ValueTree tree;
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor& t = v.toTensor();
      tree.kind = ValueTree::Kind::kTensor;
      tree.slot = fresh_value();
      if (!runs) {
        m_out.initial[static_cast<std::size_t>(tree.slot)] = t;
        m_out.own[static_cast<std::size_t>(tree.slot)] = true;
        keep_layout(t, tree.slot);
        if (t.has_storage()) {
          m_own_storages.insert(t.storage().unsafeGetStorageImpl());
          // Written by the host, or by nothing yet (filled: HostMemory): what the first op to
          // read it sees.
          m_host.made(t, tree.slot, host_code);
        }
      } else if (t.has_storage()) {
        made(t, tree.slot);
      }
      remember(t, tree.slot);
      return tree;
    }
    if (v.isTensorList() || v.isList() || v.isTuple()) {
      const std::vector<c10::IValue> elements =
          v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
      bool tensors = false;
      for (const c10::IValue& e : elements) {
        tree.items.push_back(returned(e, runs, host_code));
        tensors = tensors || tree.items.back().kind != ValueTree::Kind::kHost;
      }
      if (!tensors) {
        tree.items.clear();
        return tree;
      }
      tree.kind = v.isTuple() ? ValueTree::Kind::kTuple : ValueTree::Kind::kList;
      return tree;
    }
    return tree;  // a number, a bool: the host's, not the graph's
  }

  Recording& m_out;
  std::unordered_map<const c10::TensorImpl*, Known> m_index;
  std::unordered_set<const c10::StorageImpl*> m_own_storages;  // held by `initial`: not reused
  HostMemory m_host;  // own memory no running op has read yet
  struct Made {
    c10::weak_intrusive_ptr<c10::StorageImpl> keep;  // the storage's address is not reused meanwhile
    std::vector<std::pair<c10::ScalarType, std::int32_t>> bases;  // the first value over it, per dtype
  };
  std::unordered_map<const c10::StorageImpl*, Made> m_made_storages;  // memory recorded ops returned
  std::vector<const c10::StorageImpl*> m_argument_storages;  // the current op's
  unsigned m_modes;  // the modes on when the recording began (modes_now())
  int m_unwinding = 0;
  std::string m_limit;
  int m_depth = 0;
  bool m_skipping = false;
  std::optional<RecordedOp> m_pending;
};

std::unique_ptr<at::ObserverContext> on_record_enter(const at::RecordFunction& fn) {
  if (t_recorder != nullptr) t_recorder->enter(fn);
  return nullptr;
}

void on_record_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  if (t_recorder != nullptr) t_recorder->exit(fn);
}

// Records the ops run on this thread while it lives (RecordFunction switched on for it, should
// the caller have switched it off).
class RecordingScope {
 public:
  explicit RecordingScope(Recorder& recorder)
      : m_enabled(true),
        m_handle(at::addThreadLocalCallback(at::RecordFunctionCallback(&on_record_enter, &on_record_exit)
                                                .needsInputs(true)
                                                .needsOutputs(true)
                                                .scopes({at::RecordScope::FUNCTION}))) {
    t_recorder = &recorder;
  }
  ~RecordingScope() {
    at::removeCallback(m_handle);
    t_recorder = nullptr;
  }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  at::RecordFunctionGuard m_enabled;
  at::CallbackHandle m_handle;
};

// Note [Pinned constants], after the recording: every constant that is not a Python scalar becomes
// an alias over the storage (and offset, sizes, strides) it had, and a read of the graph.
void pin_constants(Recording& r) {
  for (std::size_t slot = 0; slot < r.initial.size(); ++slot) {
    at::Tensor& live = r.initial[slot];
    if (live.defined() && r.own[slot] && live.has_storage()) {
      // The graph's own memory: an alias of its own, with the layout the value was made with, so
      // that neither replay nor the forward's own tensor changes the other's sizes.
      const Recording::Layout& layout = r.own_layouts.at(static_cast<std::int32_t>(slot));
      torch::Tensor own = at::empty({0}, live.options());
      own.set_(live.storage(), layout.offset, layout.sizes, layout.strides);
      live = std::move(own);
      continue;
    }
    if (!live.defined() || r.own[slot] || !live.has_storage()) continue;
    if (live.unsafeGetTensorImpl()->is_wrapped_number()) continue;  // `x * 0.5`: a value of the code
    torch::Tensor pinned = at::empty({0}, live.options());
    pinned.set_(live.storage(), live.storage_offset(), live.sizes(), live.strides());
    GraphRead read;
    read.address = live.data_ptr();
    read.bytes = tensor_extent_bytes(live);
    read.dtype = live.scalar_type();
    read.sizes = live.sizes().vec();
    read.strides = live.strides().vec();
    read.held = live.storage();  // the pinned alias keeps it alive
    r.reads.push_back(std::move(read));
    live = std::move(pinned);
  }
}

void for_each_slot(const ValueTree& tree, const std::function<void(std::int32_t)>& fn) {
  if (tree.kind == ValueTree::Kind::kTensor) fn(tree.slot);
  for (const ValueTree& item : tree.items) for_each_slot(item, fn);
}

// Each op drops the values whose last use it is: neither an input, a constant, the graph's own
// memory nor an output of the forward.
void plan_releases(Recording& r) {
  std::vector<std::int32_t> last(r.initial.size(), -1);
  std::vector<bool> kept(r.initial.size(), false);
  for (const ValueTree& out : r.outputs) for_each_slot(out, [&](std::int32_t s) { kept[static_cast<std::size_t>(s)] = true; });
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const auto use = [&](std::int32_t s) { last[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(i); };
    if (!r.ops[i].runs) continue;  // reads nothing at replay, and returns the graph's own memory
    for (const ValueTree& a : r.ops[i].arguments) for_each_slot(a, use);
    for (const ValueTree& a : r.ops[i].returns) for_each_slot(a, use);
  }
  for (std::size_t s = static_cast<std::size_t>(r.inputs); s < r.initial.size(); ++s) {
    if (r.initial[s].defined() || kept[s] || last[s] < 0) continue;
    r.ops[static_cast<std::size_t>(last[s])].release.push_back(static_cast<std::int32_t>(s));
  }
}

// Note [Recapture signature]
// What a capture bakes besides addresses, as the recapture comparison sees it: the sequence of the
// recorded ops, and for each op the host values among its arguments: every one that is not a
// value of the graph (numbers, lists, strings, devices, dtypes, and Python scalars wrapped as
// tensors). A model tensor is an address, the address probe's business. Two recordings of one
// forward agree on this signature unless the forward decided something on the host from data: a
// branch (the op sequence parts) or a value passed to an op (a host value differs), however the
// value reached the host (item(), .cpu(), a raw data_ptr() read, a Python float kept on the model).
// A host value can also reach an op as a tensor the forward builds from it (torch.tensor(self.amax),
// torch::tensor(std::vector)): the graph's own memory, whose bytes the capture copies in at every
// replay (Recording::host_writes). Those bytes are part of the signature too, named by the op and
// argument that first read them.
struct HostValue {
  int argument = 0;
  const c10::IValue* value = nullptr;  // the recording's own
};

// A value the host computed and an op takes: numbers, strings, devices, dtypes and lists of them.
// Not a storage, a generator or an object, whose identity a recording bakes but that no second
// recording could compute differently from data.
bool plain_host_value(const c10::IValue& v) {
  return v.isNone() || v.isBool() || v.isInt() || v.isDouble() || v.isComplexDouble() || v.isString() ||
         v.isDevice() || v.isIntList() || v.isDoubleList() || v.isBoolList() || v.isSymInt() || v.isSymFloat() ||
         (v.isTensor() && !v.toTensor().defined());
}

std::vector<HostValue> host_values(const Recording& r, const RecordedOp& op) {
  std::vector<HostValue> out;
  for (std::size_t i = 0; i < op.arguments.size(); ++i) {
    const ValueTree& a = op.arguments[i];
    if (a.kind == ValueTree::Kind::kHost) {
      if (!plain_host_value(a.host)) continue;
      out.push_back({static_cast<int>(i), &a.host});
    } else if (a.kind == ValueTree::Kind::kTensor) {
      const at::Tensor& t = r.initial[static_cast<std::size_t>(a.slot)];
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) out.push_back({static_cast<int>(i), nullptr});
    }
  }
  return out;
}

std::string host_text(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return "None";
    return fmt::format("{}", t.item().toDouble());  // a wrapped Python scalar
  }
  std::ostringstream out;
  out << v;
  return out.str();
}

const c10::IValue& host_value_of(const Recording& r, const RecordedOp& op, const HostValue& h, c10::IValue& scratch) {
  if (h.value != nullptr) return *h.value;
  scratch = r.initial[static_cast<std::size_t>(op.arguments[static_cast<std::size_t>(h.argument)].slot)];
  return scratch;
}

bool same_host_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isBool() && b.isBool()) return a.toBool() == b.toBool();
  if (a.isNone() && b.isNone()) return true;
  if (a.isDouble() && b.isDouble()) {
    const double x = a.toDouble();
    const double y = b.toDouble();
    return std::memcmp(&x, &y, sizeof(x)) == 0;
  }
  if (a.isIntList() && b.isIntList()) {
    const c10::List<std::int64_t> x = a.toIntList();
    const c10::List<std::int64_t> y = b.toIntList();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (x.get(i) != y.get(i)) return false;
    }
    return true;
  }
  if (a.isString() && b.isString()) return a.toStringRef() == b.toStringRef();
  return host_text(a) == host_text(b);
}

std::string op_text(const RecordedOp& op, const RecordedOp* other) {
  const c10::OperatorName& name = op.op->operator_name();
  if (other == nullptr || other->op->operator_name().name != name.name || name.overload_name.empty()) return name.name;
  return fmt::format("{}.{}", name.name, name.overload_name);  // the same op, another overload
}

const std::string& source_text(const RecordedOp& op) {
  static const std::string kNone;
  return op.source != nullptr ? *op.source : kNone;
}

// A host write's bytes as values of the dtype the forward made them, "tensor(0.8311)" or
// "tensor([1, 2, 3])", and past kShown values the first element where `mine` and `other` differ.
std::string written_text(const at::Tensor& made, bool scalar, const std::vector<char>& mine,
                         const std::vector<char>& other) {
  constexpr std::size_t kShown = 8;
  const c10::ScalarType dtype = made.scalar_type();
  const auto element = static_cast<std::size_t>(made.element_size());
  const std::size_t n = element == 0 ? 0 : mine.size() / element;
  const auto text = [&](std::size_t k) -> std::string {
    try {
      const at::Tensor one = at::from_blob(const_cast<char*>(mine.data() + k * element), {1},
                                           at::TensorOptions().dtype(dtype).device(at::kCPU));
      if (dtype == at::kBool) return one.item<bool>() ? "True" : "False";
      if (c10::isIntegralType(dtype, /*includeBool=*/false)) return fmt::format("{}", one.item<std::int64_t>());
      const auto digits = element >= 8 ? 17 : element >= 4 ? 8 : 4;
      return fmt::format("{:.{}g}", one.to(at::kDouble).item<double>(), digits);
    } catch (const std::exception&) {
      return fmt::format("{:#04x}", static_cast<unsigned char>(mine[k * element]));  // complex, packed types
    }
  };
  if (n == 0 || mine.size() != other.size()) return fmt::format("a tensor of {} bytes", mine.size());
  if (n <= kShown) {
    std::vector<std::string> values;
    for (std::size_t k = 0; k < n; ++k) values.push_back(text(k));
    return scalar && n == 1 ? fmt::format("tensor({})", values.front())
                           : fmt::format("tensor([{}])", fmt::join(values, ", "));
  }
  std::size_t k = 0;
  while (k + 1 < n && std::memcmp(mine.data() + k * element, other.data() + k * element, element) == 0) ++k;
  return fmt::format("a tensor of {} values whose element {} is {}", n, k, text(k));
}

// A tensor an op reads that the forward did not make (a constant of the graph), as a read.
std::optional<GraphRead> constant_read(const Recording& r, std::int32_t slot) {
  if (slot < r.inputs) return std::nullopt;
  const at::Tensor& t = r.initial[static_cast<std::size_t>(slot)];
  if (!t.defined() || r.own[static_cast<std::size_t>(slot)] || !t.has_storage() ||
      t.unsafeGetTensorImpl()->is_wrapped_number()) {
    return std::nullopt;
  }
  GraphRead read;
  read.address = t.data_ptr();
  read.bytes = tensor_extent_bytes(t);
  return read;
}

// The constants two recordings of one op read at other addresses, argument by argument.
void moved_reads(const Recording& captured, const Recording& now, std::size_t op, const ValueTree& a,
                 const ValueTree& b, int argument, RecaptureDiff& d) {
  if (a.kind != b.kind || a.items.size() != b.items.size()) return;
  if (a.kind == ValueTree::Kind::kTensor) {
    const std::optional<GraphRead> x = constant_read(captured, a.slot);
    const std::optional<GraphRead> y = constant_read(now, b.slot);
    if (!x || !y || (x->address == y->address && x->bytes == y->bytes)) return;
    const RecordedOp& recorded = now.ops[op];
    d.moved_reads.push_back({op, op_text(recorded, nullptr), argument, *x, *y, source_text(recorded)});
    return;
  }
  for (std::size_t i = 0; i < a.items.size(); ++i) moved_reads(captured, now, op, a.items[i], b.items[i], argument, d);
}

RecaptureDiff compare_recordings(const Recording& captured, const Recording& now) {
  RecaptureDiff d;
  d.supported = true;
  const std::size_t n = std::min(captured.ops.size(), now.ops.size());
  for (std::size_t i = 0; i < n; ++i) {
    const RecordedOp& a = captured.ops[i];
    const RecordedOp& b = now.ops[i];
    if (a.op->operator_name() == b.op->operator_name()) continue;
    d.control_flow_differs = true;
    d.divergence = fmt::format("op {} of the forward: {} at capture, {} now", i + 1, op_text(a, &b), op_text(b, &a));
    d.divergence_source = b.source != nullptr ? *b.source : source_text(a);
    return d;
  }
  if (captured.ops.size() != now.ops.size()) {
    d.control_flow_differs = true;
    const bool longer = now.ops.size() > captured.ops.size();
    const RecordedOp& extra = longer ? now.ops[n] : captured.ops[n];
    d.divergence = fmt::format("the forward ran {} ops at capture and {} now; the first {}: {}", captured.ops.size(),
                               now.ops.size(), longer ? "added" : "dropped", op_text(extra, nullptr));
    d.divergence_source = source_text(extra);
    return d;
  }
  c10::IValue scratch_a;
  c10::IValue scratch_b;
  // Host writes pair by the op and argument that read them (both lists are in that order); one
  // only a recording has (memory made by host code in one, a constant in the other) is left out.
  std::size_t write_a = 0;
  std::size_t write_b = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RecordedOp& op_a = captured.ops[i];
    const RecordedOp& op_b = now.ops[i];
    const std::vector<HostValue> a = host_values(captured, op_a);
    const std::vector<HostValue> b = host_values(now, op_b);
    for (std::size_t j = 0; j < a.size() && j < b.size(); ++j) {
      const c10::IValue& x = host_value_of(captured, op_a, a[j], scratch_a);
      const c10::IValue& y = host_value_of(now, op_b, b[j], scratch_b);
      if (same_host_value(x, y)) continue;
      BakedValue v;
      v.op = op_text(op_a, nullptr);
      v.argument = a[j].argument;
      v.at_capture = host_text(x);
      v.now = host_text(y);
      v.source = source_text(op_b);
      d.values.push_back(std::move(v));
    }
    for (std::size_t j = 0; j < op_a.arguments.size() && j < op_b.arguments.size(); ++j) {
      moved_reads(captured, now, i, op_a.arguments[j], op_b.arguments[j], static_cast<int>(j), d);
    }
    const auto key = [](const Recording::HostWrite& w) { return std::make_pair(w.op, w.argument); };
    while (write_a < captured.host_writes.size() && captured.host_writes[write_a].op == i) {
      const Recording::HostWrite& x = captured.host_writes[write_a];
      while (write_b < now.host_writes.size() && key(now.host_writes[write_b]) < key(x)) ++write_b;
      ++write_a;
      if (write_b == now.host_writes.size() || key(now.host_writes[write_b]) != key(x)) continue;
      const Recording::HostWrite& y = now.host_writes[write_b++];
      if (x.bytes == y.bytes) continue;
      const at::Tensor& made = captured.initial[static_cast<std::size_t>(x.slot)];
      const auto layout = captured.own_layouts.find(x.slot);
      const bool scalar = layout != captured.own_layouts.end() && layout->second.sizes.empty();  // 0-dim as made
      BakedValue v;
      v.op = op_text(op_a, nullptr);
      v.argument = x.argument;
      v.at_capture = written_text(made, scalar, x.bytes, y.bytes);
      v.now = written_text(made, scalar, y.bytes, x.bytes);
      v.source = source_text(op_b);
      d.values.push_back(std::move(v));
    }
  }
  return d;
}

class EmulatedGraph final : public CapturedGraph {
 public:
  EmulatedGraph(std::int64_t batch_size, Recording recording, TensorList inputs, TensorList outputs)
      : m_batch_size(batch_size),
        m_recording(std::move(recording)),
        m_inputs(std::move(inputs)),
        m_outputs(std::move(outputs)),
        m_values(m_recording.initial) {
    for (std::size_t i = 0; i < m_inputs.size(); ++i) m_values[i] = m_inputs[i];
    for (std::size_t s = m_inputs.size(); s < m_values.size(); ++s) {
      if (!m_values[s].defined()) m_transient.push_back(static_cast<std::int32_t>(s));
    }
  }
  ~EmulatedGraph() override {
    with_host_lock([&] {  // Note [Foreign objects in recorded forwards]
      m_stack.clear();
      m_values.clear();
      m_recording = Recording();
    });
  }
  EmulatedGraph(const EmulatedGraph&) = delete;
  EmulatedGraph& operator=(const EmulatedGraph&) = delete;

  [[nodiscard]] std::int64_t batch_size() const override { return m_batch_size; }
  [[nodiscard]] const TensorList& static_inputs() const override { return m_inputs; }
  [[nodiscard]] const TensorList& static_outputs() const override { return m_outputs; }
  [[nodiscard]] const std::vector<GraphRead>& reads() const override { return m_recording.reads; }

  [[nodiscard]] const Recording& recording() const { return m_recording; }

  void replay() override {
    torch::NoGradGuard no_grad;
    try {
      for (const auto& [slot, layout] : m_recording.own_layouts) {
        at::Tensor& own = m_values[static_cast<std::size_t>(slot)];
        if (own.sizes() != layout.sizes || own.strides() != layout.strides || own.storage_offset() != layout.offset) {
          own.set_(own.storage(), layout.offset, layout.sizes, layout.strides);  // resize_, unsqueeze_ at capture
        }
      }
      for (const Recording::HostWrite& w : m_recording.host_writes) {
        const c10::Storage& storage = m_values[static_cast<std::size_t>(w.slot)].storage();
        std::memcpy(storage.mutable_data(), w.bytes.data(), std::min(storage.nbytes(), w.bytes.size()));
      }
      for (const RecordedOp& op : m_recording.ops) {
        if (!op.runs) continue;  // its outputs are the graph's own memory
        m_stack.clear();
        for (const ValueTree& a : op.arguments) m_stack.push_back(value(a));
        op.op->callBoxed(&m_stack);
        TORCH_CHECK(m_stack.size() == op.returns.size(), "graphcheck: ", op.op->operator_name().name, " returned ",
                    m_stack.size(), " values on replay, ", op.returns.size(), " at capture");
        for (std::size_t i = 0; i < m_stack.size(); ++i) take(op.returns[i], std::move(m_stack[i]));
        for (const std::int32_t s : op.release) m_values[static_cast<std::size_t>(s)] = at::Tensor();
      }
      m_stack.clear();
      TORCH_CHECK(m_recording.outputs.size() == m_outputs.size(), "graphcheck: the captured forward returned ",
                  m_recording.outputs.size(), " values, captured with ", m_outputs.size());
      // The static output buffers keep their addresses, as with a CUDA graph.
      for (std::size_t i = 0; i < m_outputs.size(); ++i) copy_static(m_outputs[i], value(m_recording.outputs[i]).toTensor());
    } catch (...) {
      m_stack.clear();
      drop_transient();
      throw;
    }
    drop_transient();
  }

 private:
  c10::IValue value(const ValueTree& t) const {
    switch (t.kind) {
      case ValueTree::Kind::kHost:
        return t.host;
      case ValueTree::Kind::kTensor:
        return m_values[static_cast<std::size_t>(t.slot)];
      case ValueTree::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        list.reserve(t.items.size());
        for (const ValueTree& item : t.items) list.push_back(value(item).toTensor());
        return list;
      }
      case ValueTree::Kind::kList: {
        c10::impl::GenericList list(t.host.toList().elementType());
        list.reserve(t.items.size());
        for (const ValueTree& item : t.items) list.push_back(value(item));
        return list;
      }
      case ValueTree::Kind::kTuple: {
        std::vector<c10::IValue> items;
        items.reserve(t.items.size());
        for (const ValueTree& item : t.items) items.push_back(value(item));
        return c10::ivalue::Tuple::create(std::move(items));
      }
    }
    return {};
  }

  void take(const ValueTree& t, c10::IValue&& v) {
    if (t.kind == ValueTree::Kind::kHost) return;
    if (t.kind == ValueTree::Kind::kTensor) {
      TORCH_CHECK(v.isTensor(), "graphcheck: an op returned ", v.tagKind(), " on replay where it returned a tensor at capture");
      m_values[static_cast<std::size_t>(t.slot)] = std::move(v).toTensor();
      return;
    }
    const std::vector<c10::IValue> items = v.isTuple() ? v.toTupleRef().elements().vec() : v.toListRef().vec();
    TORCH_CHECK(items.size() == t.items.size(), "graphcheck: an op returned ", items.size(),
                " values in a list on replay, ", t.items.size(), " at capture");
    for (std::size_t i = 0; i < items.size(); ++i) take(t.items[i], c10::IValue(items[i]));
  }

  void drop_transient() {
    for (const std::int32_t s : m_transient) m_values[static_cast<std::size_t>(s)] = at::Tensor();
  }

  std::int64_t m_batch_size;
  Recording m_recording;
  TensorList m_inputs;
  TensorList m_outputs;
  std::vector<at::Tensor> m_values;  // per value of the recording: this replay's
  std::vector<std::int32_t> m_transient;  // what ops return: dropped after every replay
  std::vector<c10::IValue> m_stack;
};

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
    with_host_lock([&] {  // Note [Foreign objects in recorded forwards]: a failed recording dies in here
      Recorded recorded = record_forward(model, inputs, batch_size);
      TensorList static_outputs;
      for (const at::Tensor& t : recorded.outputs) static_outputs.push_back(t.clone());
      recorded.outputs.clear();
      pin_constants(recorded.recording);
      plan_releases(recorded.recording);
      graph = std::make_unique<EmulatedGraph>(batch_size, std::move(recorded.recording), std::move(inputs),
                                              std::move(static_outputs));
    });
    return graph;
  }

  // Note [Recapture signature]: a fresh recording on `inputs`, its signature against the capture's.
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
      with_host_lock([&] {  // Note [Foreign objects in recorded forwards]
        const Recorded recorded = record_forward(model, copies, graph.batch_size());
        d = compare_recordings(emulated->recording(), recorded.recording);
      });
      return d;
    } catch (const BackendLimit& e) {
      // A call the recording cannot replay on these inputs only: the recording is a diagnostic.
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
  struct Recorded {
    Recording recording;
    TensorList outputs;  // what the forward returned
  };

  // Note [Recorded forwards]: the forward run once on `inputs`, recorded.
  static Recorded record_forward(LifecycleModel& model, const TensorList& inputs, std::int64_t batch_size) {
    Recorded out;
    HostSyncLog host_syncs;
    std::string limit;
    {
      Recorder recorder(out.recording);
      TensorList args;
      std::unordered_set<const c10::TensorImpl*> seen;
      for (const at::Tensor& t : inputs) {
        // The same tensor passed twice: two inputs of the graph, each its own static buffer.
        args.push_back(seen.insert(t.unsafeGetTensorImpl()).second ? t : t.alias());
        recorder.add_input(args.back());
      }
      const HostSyncObserver observer(host_syncs);
      const RecordingScope scope(recorder);
      const TracingForward tracing;
      out.outputs = model.forward_all(args);
      for (const at::Tensor& t : out.outputs) {
        if (!t.defined()) throw NotCapturable("every output of a captured forward must be a defined tensor");
        recorder.add_output(t);
      }
      limit = recorder.limit();
    }
    if (!host_syncs.ops.empty()) {
      throw NotCapturable(fmt::format(
          "forward calls {}{} at batch size {}: a host sync, which a CUDA graph cannot capture "
          "(the value would be frozen at capture time); keep the value on the device",
          host_syncs.ops.front(), host_syncs.where.empty() ? "" : fmt::format(" ({})", host_syncs.where),
          batch_size));
    }
    if (out.outputs.empty()) throw NotCapturable("forward must return at least one tensor to be captured");
    if (!limit.empty()) {
      throw BackendLimit(fmt::format(
          "the emulated backend cannot capture this forward: {}. A CUDA graph captures it: check this "
          "model with --backend cuda on a GPU",
          limit));
    }
    return out;
  }

  CpuMemoryMeter m_meter;
};

}  // namespace

std::unique_ptr<GraphBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

std::string python_source_now() {
  const SourceHook& hook = source_hook();
  if (!hook) return {};
  std::string where = hook();
  const std::size_t colon = where.rfind(':');
  return is_front_file(std::string_view(where).substr(0, colon == std::string::npos ? where.size() : colon))
             ? std::string()
             : where;
}

namespace {
HostLock& host_lock() {
  static HostLock lock;
  return lock;
}
}  // namespace

void set_host_lock(HostLock lock) { host_lock() = std::move(lock); }

void set_source_hook(SourceHook hook) { source_hook() = std::move(hook); }

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
