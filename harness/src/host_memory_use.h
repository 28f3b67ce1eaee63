#pragma once
// How an op meets memory the host may have written into (a tensor built from host values, or what
// the forward's own aten::empty returned): shared by the emulated backend's recorder, which keeps
// those bytes as the first op to read them sees them (Recording::host_writes, Note [Recorded
// forwards]), and the validate pass's eager op log, which must keep them too (Note [Eager op log]).

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstddef>
#include <cstring>

namespace graphcheck {

enum class HostMemoryUse {
  none,        // a view of it (slice, select, view), or an op that changes only its metadata
  reads,       // the op reads its bytes (add_ too: an in-place op reads what it writes)
  overwrites,  // the op writes it without reading it: an out= buffer, fill_, zero_, copy_, a random fill
};

// Argument `i` of `op`, whose schema entry is `argument`.
inline HostMemoryUse host_memory_use(const c10::OperatorHandle& op, const c10::Argument& argument, std::size_t i) {
  const c10::AliasInfo* alias = argument.alias_info();
  if (alias == nullptr) return HostMemoryUse::reads;
  if (!alias->isWrite()) return HostMemoryUse::none;
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

}  // namespace graphcheck
