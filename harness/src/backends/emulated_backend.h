#pragma once
// The emulated graph backend (CPU): a faithful model of CUDA-graph pointer baking.
//
// Note [Pinned constants]
// Capture records the forward's ops (Note [Recorded forwards], emulated_backend.cpp): every tensor
// the forward reads that is not its input, nor made by one of its ops, is a constant of the graph
// holding the live tensor itself. Each constant is then *pinned*: replaced by a fresh alias tensor
// over the storage (and offset, sizes, strides) it had at capture. Replay calls the recorded ops on
// the pinned constants. So an in-place copy_() into the storage is visible to replay, while
// rebinding a member, set_data() or replacing a parameter is not: exactly what a CUDA graph does
// with the device pointers in its kernel parameters.

#include <memory>
#include <string>

#include "graphcheck/engine/backend.h"

namespace graphcheck {

[[nodiscard]] std::unique_ptr<GraphBackend> make_emulated_backend();

// Where the Python code that runs now is, as "model.py:42" (Note [Source of recorded ops]); "" where
// no Python runs (a C++ model) and where the innermost such frame is the Python front's own.
[[nodiscard]] std::string python_source_now();

}  // namespace graphcheck
