#pragma once
// Every difference between the libtorch versions graphcheck supports (2.4 and newer) lives here.

#include <torch/version.h>

#define GRAPHCHECK_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// Float8_e8m0fnu (UE8M0 scales) arrived in libtorch 2.7; before it, E8M0 bytes live in uint8.
#if GRAPHCHECK_TORCH_AT_LEAST(2, 7)
#define GRAPHCHECK_HAS_FLOAT8_E8M0 1
#else
#define GRAPHCHECK_HAS_FLOAT8_E8M0 0
#endif

// CUDAGraph(keep_graph=true) keeps the captured cudaGraph_t after capture_end() (raw_cuda_graph(),
// an explicit instantiate()) from libtorch 2.11; before it the pointer audit reads the graph
// from the capture stream (cudaStreamGetCaptureInfo) before capture_end().
#if GRAPHCHECK_TORCH_AT_LEAST(2, 11)
#define GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH 1
#else
#define GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH 0
#endif

// CUDAGraph::capture_begin() routes pinned host allocations into the graph's pool as well
// (at::HostAllocator::begin_allocate_to_pool / end_allocate_to_pool) from libtorch 2.11; 2.10's
// ATen/core/CachingHostAllocator.h has neither (Note [Failed capture] in
// backends/cuda_backend.cpp).
#if GRAPHCHECK_TORCH_AT_LEAST(2, 11)
#define GRAPHCHECK_HAS_HOST_ALLOCATOR_POOLS 1
#else
#define GRAPHCHECK_HAS_HOST_ALLOCATOR_POOLS 0
#endif

// PyTorch's check_input_liveness (2.14) is Python only (a TorchDispatchMode in
// torch.utils._cuda_debug); the cuda backend carries a C++ counterpart of it in every version
// (Note [Input liveness] in backends/cuda_parts.h).
