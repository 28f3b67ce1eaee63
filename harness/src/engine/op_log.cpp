#include "engine/op_log.h"

#include "host_memory_use.h"
#include "host_sync_ops.h"
#include "backends/emulated_backend.h"
#include "fingerprint.h"

#include <ATen/record_function.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <optional>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>
#include <string>

namespace graphcheck::engine {
namespace {

struct OpLogState {
  OpLogDigest* out = nullptr;
  int depth = 0;  // ops entered and not left: only depth 0 is the forward's own call
  // The top-level op now running: code that builds a tensor from host data (the tracer's key
  // excluded: torch.tensor(...)), an empty-family op, and the exceptions in flight as it began.
  bool host_code = false;
  bool uninitialised = false;
  int unwinding = 0;
  // Memory the host may write, until an op reads it first: the log keeps its bytes then, as a
  // recording keeps them (Recording::host_writes). An empty-family op's memory is filled as a
  // recording fills it, so that bytes nobody wrote do not make two logs differ.
  HostMemory host;
  // Which tensor an op reads, as a recording tells its values apart (Note [A read chosen at
  // capture]): the forward's inputs by position, memory its ops returned by nothing more than the
  // ops (a tensor over it made with no op, as torch::tensor's and .data's are, included), and any
  // other tensor (one made outside the forward: a weight) by its address and size. By storage;
  // weak references keep each address from being reused while listed.
  std::unordered_map<const c10::StorageImpl*, std::size_t> inputs;
  std::unordered_map<const c10::StorageImpl*, c10::weak_intrusive_ptr<c10::StorageImpl>> made;
  // The top-level op's arguments' storages, taken as it is entered (its inputs are gone at exit),
  // and how many results it has (a boxed call's outputs are the interpreter's whole stack).
  std::vector<const c10::StorageImpl*> arguments;
  std::size_t returns = 0;
};

thread_local OpLogState t_log;

// FNV-1a over the bytes fed, one op at a time, folded into the running digest.
class Hasher {
 public:
  void bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) m_h = (m_h ^ p[i]) * 0x100000001b3ULL;
  }
  template <class T>
  void value(const T& v) {
    bytes(&v, sizeof(v));
  }
  void tag(char c) { value(c); }
  [[nodiscard]] std::uint64_t get() const { return m_h; }

 private:
  std::uint64_t m_h = 0xcbf29ce484222325ULL;
};

void feed_wrapped_number(Hasher& h, const at::Tensor& t) {
  // A wrapped number is a 0-dim CPU tensor: read without an op (an op would be logged).
  const void* p = t.unsafeGetTensorImpl()->data();
  h.tag('w');
  h.value(static_cast<std::int8_t>(t.scalar_type()));
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: h.value(*static_cast<const double*>(p)); break;
    case c10::ScalarType::Float: h.value(*static_cast<const float*>(p)); break;
    case c10::ScalarType::Long: h.value(*static_cast<const std::int64_t*>(p)); break;
    case c10::ScalarType::Int: h.value(*static_cast<const std::int32_t*>(p)); break;
    case c10::ScalarType::Bool: h.value(*static_cast<const bool*>(p)); break;
    case c10::ScalarType::ComplexDouble: h.bytes(p, 16); break;
    default: h.bytes(p, t.element_size()); break;
  }
}

void feed(Hasher& h, const c10::IValue& v, int depth) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      h.tag('u');
    } else if (t.unsafeGetTensorImpl()->is_wrapped_number() && t.has_storage()) {
      feed_wrapped_number(h, t);
    } else {
      h.tag('T');
      h.value(static_cast<std::int8_t>(t.scalar_type()));
    }
  } else if (v.isNone()) {
    h.tag('n');
  } else if (v.isInt()) {
    h.tag('i');
    h.value(v.toInt());
  } else if (v.isDouble()) {
    h.tag('d');
    h.value(v.toDouble());
  } else if (v.isBool()) {
    h.tag('b');
    h.value(v.toBool());
  } else if (v.isComplexDouble()) {
    h.tag('c');
    const c10::complex<double> c = v.toComplexDouble();
    h.value(c.real());
    h.value(c.imag());
  } else if (v.isString()) {
    h.tag('s');
    const std::string& s = v.toStringRef();
    h.value(s.size());
    h.bytes(s.data(), s.size());
  } else if (v.isDevice()) {
    h.tag('D');
    h.value(static_cast<std::int16_t>(v.toDevice().type()));
    h.value(static_cast<std::int16_t>(v.toDevice().index()));
  } else if (v.isIntList()) {
    h.tag('I');
    h.value(static_cast<std::uint64_t>(v.toIntList().size()));
    for (std::int64_t i : v.toIntList()) h.value(i);
    h.tag(']');
  } else if (v.isDoubleList()) {
    h.tag('F');
    h.value(static_cast<std::uint64_t>(v.toDoubleList().size()));
    for (double d : v.toDoubleList()) h.value(d);
    h.tag(']');
  } else if (v.isBoolList()) {
    h.tag('B');
    h.value(static_cast<std::uint64_t>(v.toBoolList().size()));
    for (bool b : v.toBoolList()) h.value(b);
    h.tag(']');
  } else if (v.isList() && depth < 8) {
    h.tag('L');
    h.value(static_cast<std::uint64_t>(v.toListRef().size()));
    for (const c10::IValue& e : v.toListRef()) feed(h, e, depth + 1);
    h.tag(']');
  } else if (v.isTuple() && depth < 8) {
    h.tag('(');
    h.value(static_cast<std::uint64_t>(v.toTupleRef().elements().size()));
    for (const c10::IValue& e : v.toTupleRef().elements()) feed(h, e, depth + 1);
    h.tag(')');
  } else {
    // Anything else (an object, a generator, a future): its kind only.
    h.tag('o');
    const std::string kind = v.tagKind();
    h.bytes(kind.data(), kind.size());
  }
}

// The running digest: order matters.
void fold(OpLogState& s, const Hasher& h) { s.out->hash = (s.out->hash ^ h.get()) * 0x9e3779b97f4a7c15ULL + s.out->ops; }

// A region that is no op (an autograd Function's apply, which records only its tensors) is
// transparent: the ops inside it are the forward's own calls, as the emulated backend records
// them (Note [Recorded forwards]).
bool is_op(const at::RecordFunction& fn) { return fn.operator_name().has_value(); }

// A tensor argument of a top-level op: which one it is (OpLogState::made).
void feed_identity(OpLogState& s, Hasher& h, const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) return;  // its value is fed already
  if (!t.has_storage()) return;
  const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (const auto in = s.inputs.find(storage); in != s.inputs.end()) {
    h.tag('<');
    h.value(static_cast<std::uint64_t>(in->second));
    return;
  }
  if (s.made.count(storage)) return;
  h.tag('k');
  h.value(reinterpret_cast<std::uintptr_t>(t.data_ptr()));
  h.value(static_cast<std::uint64_t>(t.nbytes()));
}
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  OpLogState& s = t_log;
  if (s.out == nullptr || !is_op(fn)) return nullptr;
  const char* name = fn.name();
  if (s.depth > 0) {
    ++s.depth;
    // A host sync inside an op: the recording's host-sync check would see it (another path).
    if (is_host_sync_op(name)) {
      Hasher h;
      h.tag('!');
      h.bytes(name, std::strlen(name));
      fold(s, h);
    }
    return nullptr;
  }
  const bool host_code = c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Tracer);
  std::optional<c10::OperatorHandle> op;
  if (!host_code) {
    // An op of the TorchScript interpreter's own, not the dispatcher's, is transparent, as it is
    // to a recording: the ops inside it are the forward's calls.
    op = c10::Dispatcher::singleton().findOp(*fn.operator_name());
    if (!op) return nullptr;
  }
  ++s.depth;
  Hasher h;
  h.bytes(name, std::strlen(name));
  h.tag('|');
  for (const c10::IValue& input : fn.inputs()) feed(h, input, 0);
  s.arguments.clear();
  for (const c10::IValue& input : fn.inputs()) {
    for_each_tensor_in(input, [&](const at::Tensor& t) {
      if (!host_code) feed_identity(s, h, t);
      if (t.has_storage()) s.arguments.push_back(t.storage().unsafeGetStorageImpl());
    });
  }
  s.out->ops += 1;
  fold(s, h);
  s.host_code = host_code;
  s.returns = op ? op->schema().returns().size() : fn.outputs().size();
  s.uninitialised = !host_code && returns_uninitialised(name, fn.operator_name()->overload_name);
  s.unwinding = std::uncaught_exceptions();
  if (op && !s.uninitialised && !s.host.empty()) {
    const std::vector<c10::Argument>& arguments = op->schema().arguments();
    auto inputs = fn.inputs();
    if (inputs.size() >= arguments.size()) {
      inputs = inputs.slice(inputs.size() - arguments.size());  // a boxed call passes its whole stack
      for (std::size_t i = 0; i < inputs.size(); ++i) {
        for_each_tensor_in(inputs[i], [&](const at::Tensor& t) { s.host.meet(*op, arguments[i], i, t); });
      }
    }
  }
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  OpLogState& s = t_log;
  if (s.out == nullptr || s.depth == 0 || !is_op(fn)) return;
  if (--s.depth > 0) return;
  const bool made = s.host_code || s.uninitialised;
  const bool host_code = s.host_code;
  s.host_code = s.uninitialised = false;
  if (std::uncaught_exceptions() > s.unwinding) {
    s.host.threw();  // it returned nothing, and read nothing a recording keeps
    return;
  }
  // Memory an op returned is the forward's own only where it is none of its arguments' (a view of
  // a weight, weight.t(), is still the weight), as a recording tells them apart.
  const std::vector<const c10::StorageImpl*>& arguments = s.arguments;
  c10::ArrayRef<c10::IValue> outputs(fn.outputs());
  if (!host_code && outputs.size() > s.returns) outputs = outputs.slice(outputs.size() - s.returns);
  for (const c10::IValue& v : outputs) {
    for_each_tensor_in(v, [&](const at::Tensor& t) {
      if (!t.has_storage()) return;
      const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
      if (std::find(arguments.begin(), arguments.end(), storage) != arguments.end()) return;
      s.made.try_emplace(storage, t.storage().getWeakStorageImpl());
    });
  }
  if (made) {
    for (const c10::IValue& v : outputs) {
      for_each_tensor_in(v, [&](const at::Tensor& t) { s.host.made(t, -1, host_code); });
    }
    return;
  }
  Hasher h;
  bool read = false;
  s.host.returned(outputs, [&](const HostMemory::FirstRead& f) {
    h.tag('h');
    h.value(static_cast<std::uint64_t>(f.argument));
    h.value(fingerprint_bytes(f.bytes->data(), f.bytes->size()));
    read = true;
  });
  if (read) fold(s, h);
}

}  // namespace

OpLogScope::OpLogScope(OpLogDigest& out) : OpLogScope(out, {}) {}

OpLogScope::OpLogScope(OpLogDigest& out, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(t_log.out == nullptr, "graphcheck: op logs do not nest");
  t_log = {};
  t_log.out = &out;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined() && inputs[i].has_storage()) {
      t_log.inputs.try_emplace(inputs[i].storage().unsafeGetStorageImpl(), i);
    }
  }
  m_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                                            .needsInputs(true)
                                            .needsOutputs(true)
                                            .scopes({at::RecordScope::FUNCTION}));
}

OpLogScope::~OpLogScope() {
  at::removeCallback(m_handle);
  t_log = {};
}

// ---- Note [Where a forward stops repeating] --------------------------------------------------

namespace {

struct OpTrailState {
  OpTrail* out = nullptr;
  int depth = 0;                // ops entered and not left
  bool fingerprinting = false;  // the ops a fingerprint itself runs are no part of the forward
  // The storages of uninitialised outputs: an op that writes into one (masked_fill_ on an
  // empty() buffer) may leave bytes of it unwritten, so its outputs are not compared either.
  std::vector<const void*> uninitialised;
};
thread_local OpTrailState t_trail;

std::unique_ptr<at::ObserverContext> on_trail_enter(const at::RecordFunction& fn) {
  OpTrailState& s = t_trail;
  if (s.out == nullptr || s.fingerprinting || !is_op(fn)) return nullptr;
  if (s.depth == 0) {
    OpTrail::Op& op = s.out->ops.emplace_back();
    op.name = fn.name();
    op.compared = !returns_uninitialised(op.name.c_str(), fn.operator_name()->overload_name);
    try {
      op.where = python_source_now();
    } catch (...) {
      // The place is a detail: the op stands without it.
    }
  }
  ++s.depth;
  return nullptr;
}

const void* storage_of(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
}

// The tensors an op returns: a tensor, a list of them, or numbers (aten::item's).
template <class Fn>
void for_each_output(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor()) {
    fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) fn(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) fn(e.toTensor());
    }
  }
}

void on_trail_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  OpTrailState& s = t_trail;
  if (s.out == nullptr || s.fingerprinting || s.depth == 0 || !is_op(fn)) return;
  if (--s.depth > 0 || s.out->ops.empty()) return;
  OpTrail::Op& op = s.out->ops.back();
  const auto uninitialised = [&](const at::Tensor& t) {
    const void* storage = storage_of(t);
    return storage != nullptr && std::find(s.uninitialised.begin(), s.uninitialised.end(), storage) != s.uninitialised.end();
  };
  for (const c10::IValue& v : fn.outputs()) {
    for_each_output(v, [&](const at::Tensor& t) {
      if (!op.compared && storage_of(t) != nullptr) s.uninitialised.push_back(storage_of(t));
      if (op.compared && uninitialised(t)) op.compared = false;
    });
  }
  if (!op.compared) return;
  s.fingerprinting = true;
  try {
    std::uint64_t h = 0x9e3779b97f4a7c15ULL;
    const auto mix = [&h](std::uint64_t x) { h = (h ^ x) * 0x100000001b3ULL; };
    for (const c10::IValue& v : fn.outputs()) {
      if (v.isInt()) mix(static_cast<std::uint64_t>(v.toInt()));
      if (v.isBool()) mix(v.toBool() ? 1 : 2);
      if (v.isDouble()) {
        const double d = v.toDouble();
        std::uint64_t bits = 0;
        std::memcpy(&bits, &d, sizeof(bits));
        mix(bits);
      }
      for_each_output(v, [&](const at::Tensor& t) {
        if (t.defined()) mix(fingerprint(t));
      });
    }
    op.outputs = h;
  } catch (...) {
    op.compared = false;  // a tensor the fingerprint cannot read says nothing either way
  }
  s.fingerprinting = false;
}

}  // namespace

OpTrailScope::OpTrailScope(OpTrail& out) {
  TORCH_CHECK(t_trail.out == nullptr && t_log.out == nullptr, "graphcheck: op trails do not nest");
  t_trail = {&out, 0, false, {}};
  m_handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_trail_enter, &on_trail_exit).needsOutputs(true).scopes({at::RecordScope::FUNCTION}));
}

OpTrailScope::~OpTrailScope() {
  at::removeCallback(m_handle);
  t_trail = {};
}

std::optional<std::size_t> first_divergence(const OpTrail& a, const OpTrail& b) {
  const std::size_t n = std::min(a.ops.size(), b.ops.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (a.ops[i].name != b.ops[i].name) return i;
    if (a.ops[i].compared && b.ops[i].compared && a.ops[i].outputs != b.ops[i].outputs) return i;
  }
  if (a.ops.size() != b.ops.size()) return n;
  return std::nullopt;
}

}  // namespace graphcheck::engine
