#pragma once
// The cuda graph backend (GRAPHCHECK_HAS_CUDA builds): at::cuda::CUDAGraph capture of a model's
// forward, one graph per batch size, into one private memory pool shared by the scenario's graphs
// (as serving engines do); warm-up on a side stream, static input and output buffers, replay on
// the capture stream. The capture phase's hook and memory counts see the captured forward only,
// as the emulated backend's see its one traced forward (Note [Uncounted forwards] in
// cuda_parts.h); a capture that fails leaves neither the stream capturing nor the allocator
// routed into the pool (Note [Failed capture] in cuda_backend.cpp). What a graph reads comes from
// the pointer audit of the captured cudaGraph_t (Note [Pointer audit] in pointer_audit.h),
// confirmed by a second capture, with a C++ counterpart of PyTorch's check_input_liveness as a
// second opinion (Note [Input liveness] in cuda_parts.h). A CUDA graph does not keep the storages
// it reads alive. Memory comes from the CUDA caching allocator's device stats, timing from CUDA
// events, kernel and memory operation counts from CUPTI where built (GRAPHCHECK_HAS_CUPTI).

#include <memory>
#include <string>

#include "graphcheck/engine/backend.h"

namespace graphcheck {

// Whether a CUDA device can be used, and if not why ("cudaGetDeviceCount: no CUDA-capable device
// is detected"). Touches the CUDA runtime (not the driver library at link time).
struct CudaAvailability {
  bool usable = false;
  std::string reason;  // the device's name, or why none is usable
};
[[nodiscard]] CudaAvailability cuda_availability();

// Throws std::invalid_argument with the reason and the fix when no device is usable or CUPTI is
// busy (the CLI exits 2). `mechanisms` receives what the backend will run (audit, liveness,
// CUPTI) for the report.
[[nodiscard]] std::unique_ptr<GraphBackend> make_cuda_backend(std::string& mechanisms);

}  // namespace graphcheck
