#pragma once
// How many in-place writes a tensor has taken: its version counter, which every in-place op
// (fill_, copy_, uniform_, ...) bumps, and its content, for writes made past libtorch (a memcpy
// through data_ptr() bumps nothing). Tensors over one storage share a version counter and are
// counted together. Used by the init_count probe (observe pass) and the growth pass.

#include <c10/util/Exception.h>
#include <torch/types.h>

#include <cstdint>

#include "fingerprint.h"

namespace graphcheck {

struct WriteState {
  std::int64_t version = -1;  // -1: no version counter (an inference tensor)
  std::uint64_t fingerprint = 0;
};

inline WriteState write_state(const torch::Tensor& t) {
  WriteState s;
  try {
    s.version = static_cast<std::int64_t>(t._version());
  } catch (const c10::Error&) {
    s.version = -1;
  }
  s.fingerprint = fingerprint(t);
  return s;
}

// Writes between two states: the version delta, or 1 when only the content shows a write.
inline std::int64_t writes_between(const WriteState& before, const WriteState& after) {
  const std::int64_t versions = before.version >= 0 && after.version >= 0 ? after.version - before.version : 0;
  if (versions > 0) return versions;
  return before.fingerprint != after.fingerprint ? 1 : 0;
}

}  // namespace graphcheck
