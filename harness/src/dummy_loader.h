#pragma once
// The dummy load format: fills weights with deterministic values instead of reading a checkpoint.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graphcheck/model.h"

namespace graphcheck {

// Walks the module tree and initialises each module's *own* parameters and persistent buffers
// once (not its recursive state): a tensor with a dummy_weight_value attribute is filled with
// that constant (integer dtypes too), floating tensors with uniform values in [-1e-3, 1e-3],
// integer ones with values in [0, 8), booleans at random; non-persistent buffers are not touched.
// Deterministic in `seed`. Returns the dotted names initialised, in walk order.
// `on_write` sees every tensor write, by dotted name.
std::vector<std::string> dummy_load(
    LifecycleModel& model, std::uint64_t seed,
    const std::function<void(const std::string&, const torch::Tensor&)>& on_write = {});

}  // namespace graphcheck
