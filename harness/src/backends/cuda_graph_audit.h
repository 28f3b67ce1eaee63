#pragma once
// The CUDA half of the pointer audit (Note [Pointer audit] in pointer_audit.h): walks a captured
// cudaGraph_t with the driver's functions (kernel nodes, memcpy and memset nodes, child graphs
// depth first; event record / wait and other nodes are counted and ignored) and hands each
// kernel node's parameter layout and bytes to the pure audit.

#include <cuda_runtime_api.h>

#include "backends/pointer_audit.h"

namespace graphcheck {

// Throws std::runtime_error naming the driver function that failed.
[[nodiscard]] audit::AuditResult audit_cuda_graph(cudaGraph_t graph,
                                                  const audit::AuditRanges& ranges);

}  // namespace graphcheck
