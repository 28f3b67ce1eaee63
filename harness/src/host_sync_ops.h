#pragma once
// Ops that synchronise with the host: a CUDA graph cannot capture them. Shared by the emulated
// backend's host-sync check and the validate pass's eager op log (Note [Eager op log]). And the
// ops that return memory they never write, shared by the emulated backend's recorder (Note
// [Recorded forwards]) and the op trail (Note [Where a forward stops repeating]).

#include <cstring>
#include <string_view>

namespace graphcheck {

// Ops that read data to the host on CUDA (a sync inside the op). Reading a value through
// data_ptr() or .cpu() on a CPU tensor calls no op at all: the capture validation (replays on
// fresh inputs vs eager) catches the control flow such a read freezes.
inline constexpr const char* kHostSyncOps[] = {
    "aten::item",           "aten::_local_scalar_dense", "aten::is_nonzero",
    "aten::nonzero",        "aten::argwhere",            "aten::masked_select",
    "aten::unique",         "aten::_unique",             "aten::_unique2",
    "aten::unique_dim",     "aten::unique_consecutive",  "aten::unique_dim_consecutive",
    "aten::equal",          "aten::allclose",            "aten::bincount",
    "aten::tolist",         "aten::nonzero_numpy"};

inline bool is_host_sync_op(const char* name) {
  for (const char* op : kHostSyncOps) {
    if (std::strcmp(name, op) == 0) return true;
  }
  return false;
}

// aten::empty and its kin: what their outputs hold is whatever the allocator hands back. Not their
// out= overloads (empty.out, empty_like.out), which return the caller's tensor.
inline bool returns_uninitialised(const char* name, std::string_view overload = {}) {
  if (overload.size() >= 3 && overload.substr(overload.size() - 3) == "out") return false;
  for (const char* op : {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
                         "aten::new_empty_strided", "aten::empty_permuted"}) {
    if (std::strcmp(name, op) == 0) return true;
  }
  return false;
}

}  // namespace graphcheck
