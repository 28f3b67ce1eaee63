#pragma once
// Memory the host may write into (a tensor built from host values, or what the forward's own
// empty-family op returned), followed from where it is made to the first op that reads it:
// shared by the emulated backend's recorder, which keeps those bytes as that op sees them
// (Recording::host_writes, Note [Recorded forwards]), and the validate pass's eager op log, which
// must keep them too (Note [Eager op log]).

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/util/intrusive_ptr.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace graphcheck {

// Each defined tensor an argument or result holds: itself, or those of a list or tuple (Tensor?[]
// of aten::index included), nested.
template <class Fn>
void for_each_tensor_in(const c10::IValue& v, const Fn& fn) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec()) {
      if (t.defined()) fn(t);
    }
  } else if (v.isList() || v.isTuple()) {
    for (const c10::IValue& e : v.isList() ? v.toListRef() : v.toTupleRef().elements()) for_each_tensor_in(e, fn);
  }
}

enum class HostMemoryUse {
  none,        // an op that changes only its metadata (detach_, unsqueeze_, resize_)
  reads,       // the op reads its bytes (add_ too: an in-place op reads what it writes)
  overwrites,  // the op writes it without reading it: an out= buffer, fill_, zero_, copy_, a random fill
  maybe,       // an argument the op may return a view of (slice, view) or a copy of (to, contiguous):
               // a read where none of its results is over the same memory
};

// Argument `i` of `op`, whose schema entry is `argument`.
inline HostMemoryUse host_memory_use(const c10::OperatorHandle& op, const c10::Argument& argument, std::size_t i) {
  const c10::AliasInfo* alias = argument.alias_info();
  if (alias == nullptr) return HostMemoryUse::reads;
  if (!alias->isWrite()) return HostMemoryUse::maybe;
  // detach_ (which torch.tensor() itself calls), unsqueeze_, resize_: metadata only.
  if (op.hasTag(at::Tag::inplace_view)) return HostMemoryUse::none;
  if (argument.kwarg_only()) return HostMemoryUse::overwrites;  // out=
  if (i == 0) {
    const char* name = op.operator_name().name.c_str();
    for (const char* fill : {"aten::fill_", "aten::zero_", "aten::copy_", "aten::uniform_", "aten::normal_",
                             "aten::random_", "aten::exponential_", "aten::bernoulli_", "aten::geometric_",
                             "aten::log_normal_", "aten::cauchy_"}) {
      if (std::strcmp(name, fill) == 0) return HostMemoryUse::overwrites;
    }
  }
  return HostMemoryUse::reads;
}

// The memory one recording (or one op log) follows. An empty-family op's memory holds no value of
// the forward's (in eager, whatever the allocator hands back): it is filled with kUnwritten as it
// is made, and so is what resize_ adds to it, so that two runs of a forward hold the same bytes
// there unless the host wrote other ones.
class HostMemory {
 public:
  static constexpr int kUnwritten = 0xA5;

  // A first read the op just returned from made: argument `argument` read the memory made as
  // `slot`, whose bytes were `bytes` as the op found them (the caller's to keep or move).
  struct FirstRead {
    std::int32_t slot = -1;
    int argument = 0;
    std::vector<char>* bytes = nullptr;
  };

  [[nodiscard]] bool empty() const { return m_unread.empty(); }

  // `t` was made by host code (`host_code`: torch.tensor(...)) or an empty-family op, as `slot`.
  void made(const at::Tensor& t, std::int32_t slot, bool host_code) {
    if (!t.has_storage()) return;
    const c10::Storage& storage = t.storage();
    if (!host_code && storage.nbytes() > 0 && t.device().is_cpu()) {
      std::memset(storage.mutable_data(), kUnwritten, storage.nbytes());
    }
    m_unread.try_emplace(storage.unsafeGetStorageImpl(), Unread{storage.getWeakStorageImpl(), slot});
  }

  // Argument `i` of the op now entered, one of the tensors it holds.
  void meet(const c10::OperatorHandle& op, const c10::Argument& argument, std::size_t i, const at::Tensor& t) {
    if (m_unread.empty() || !t.defined() || !t.has_storage()) return;
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    const auto it = m_unread.find(impl);
    if (it == m_unread.end()) return;
    HostMemoryUse use = host_memory_use(op, argument, i);
    // An overwrite of part of it (a view's copy_, out= a slice) leaves the rest as the host wrote it.
    const c10::Storage& storage = t.storage();
    if (use == HostMemoryUse::overwrites &&
        !(t.storage_offset() == 0 && t.is_contiguous() && t.nbytes() == storage.nbytes())) {
      use = HostMemoryUse::reads;
    }
    // Several arguments over it (t[:2].copy_(t[2:])): a read among them is a read.
    Met* m = nullptr;
    for (Met& met : m_met) {
      if (met.impl == impl) m = &met;
    }
    if (m != nullptr) {
      if (rank(use) <= rank(m->use)) return;
      m->use = use;
      m->argument = static_cast<int>(i);
    } else {
      m = &m_met.emplace_back(Met{impl, storage, it->second.slot, static_cast<int>(i), use, storage.nbytes(), {}});
    }
    if (use == HostMemoryUse::reads && m->storage.device().is_cpu()) {
      const auto* bytes = static_cast<const char*>(m->storage.data());  // before the op writes them (add_)
      m->at_entry.assign(bytes, bytes + m->storage.nbytes());
    }
  }

  // The op now entered returned `outputs` (its results only: a boxed call's stack holds more):
  // `fn(FirstRead)` for each memory it read first, in the order met; none of it is followed any
  // more, nor what it overwrote.
  template <class Fn>
  void returned(c10::ArrayRef<c10::IValue> outputs, const Fn& fn) {
    for (Met& m : m_met) {
      if (m.use == HostMemoryUse::none) {
        // resize_ on it: the bytes it added are no value either.
        const std::size_t now = m.storage.nbytes();
        if (now > m.bytes && m.storage.device().is_cpu()) {
          std::memset(static_cast<char*>(m.storage.mutable_data()) + m.bytes, kUnwritten, now - m.bytes);
        }
        continue;
      }
      if (m.use == HostMemoryUse::maybe && returns_over(outputs, m.impl)) continue;  // a view: no use yet
      m_unread.erase(m.impl);
      if (m.use == HostMemoryUse::overwrites || !m.storage.device().is_cpu()) continue;
      if (m.use == HostMemoryUse::maybe) {  // read, not written: as the op found them
        const auto* bytes = static_cast<const char*>(m.storage.data());
        m.at_entry.assign(bytes, bytes + m.storage.nbytes());
      }
      fn(FirstRead{m.slot, m.argument, &m.at_entry});
    }
    m_met.clear();
  }

  // The op now entered threw: nothing it met was used.
  void threw() { m_met.clear(); }

 private:
  struct Unread {
    c10::weak_intrusive_ptr<c10::StorageImpl> keep;  // the address is not reused while listed
    std::int32_t slot = -1;
  };
  struct Met {
    const c10::StorageImpl* impl = nullptr;
    c10::Storage storage;
    std::int32_t slot = -1;
    int argument = 0;
    HostMemoryUse use = HostMemoryUse::none;
    std::size_t bytes = 0;       // the storage's size as the op was entered
    std::vector<char> at_entry;  // a read's bytes as the op found them
  };

  static int rank(HostMemoryUse use) {
    switch (use) {
      case HostMemoryUse::none: return 0;
      case HostMemoryUse::maybe: return 1;
      case HostMemoryUse::overwrites: return 2;
      case HostMemoryUse::reads: return 3;
    }
    return 0;
  }

  static bool returns_over(c10::ArrayRef<c10::IValue> outputs, const c10::StorageImpl* impl) {
    bool over = false;
    for (const c10::IValue& v : outputs) {
      for_each_tensor_in(v, [&](const at::Tensor& t) {
        over = over || (t.has_storage() && t.storage().unsafeGetStorageImpl() == impl);
      });
    }
    return over;
  }

  std::unordered_map<const c10::StorageImpl*, Unread> m_unread;
  std::vector<Met> m_met;
};

}  // namespace graphcheck
