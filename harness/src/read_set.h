#pragma once
// Names the entries of a captured graph's read set after the live tensors they were at capture.

#include <vector>

#include "graphcheck/backend.h"
#include "graphcheck/model.h"

namespace graphcheck {

// An entry takes the name of the live tensor with the same storage, offset, sizes and strides;
// failing that, of a live tensor over the same storage (is_view = true); failing that, it stays
// unnamed (the forward reads a tensor the model never declared).
void resolve_read_set_names(std::vector<ReadSetEntry>& read_set,
                            const std::vector<NamedTensor>& live);

}  // namespace graphcheck
