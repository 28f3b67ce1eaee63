#pragma once
// The emulated graph backend (CPU): a faithful model of CUDA-graph pointer baking.
//
// Note [Pinned constants]
// Capture traces the forward with the TorchScript tracer: every tensor the forward reads that is
// not its input becomes a graph constant holding the live tensor itself. Each constant is then
// *pinned*: replaced by a fresh alias tensor over the storage (and offset, sizes, strides) it had
// at capture. Replay runs the pinned graph with the TorchScript interpreter, without any graph
// optimisation (constant folding would bake values, not addresses). So an in-place copy_() into
// the storage is visible to replay, while rebinding a member, set_data() or replacing a parameter
// is not: exactly what a CUDA graph does with the device pointers in its kernel parameters.
//
// Every use of the tracer stays in this file and emulated_backend.cpp, so that another recorder
// can replace it (the tracer is deprecated since PyTorch 2.11).

#include <memory>
#include <string>

#include "graphcheck/engine/backend.h"

namespace graphcheck {

[[nodiscard]] std::unique_ptr<GraphBackend> make_emulated_backend();

// Where the Python code that runs now is, as "model.py:42": the innermost frame outside torch's
// own package and the Python front's; "" where no Python runs (a C++ model).
[[nodiscard]] std::string python_source_now();

}  // namespace graphcheck
