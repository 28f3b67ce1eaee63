#pragma once
// Every difference between the CUDA toolkit versions graphcheck's CUDA code compiles against
// (12.x and 13) lives here, as torch_compat.h does for libtorch.

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace graphcheck::cuda_compat {

// The graph a stream is capturing into (cudaStreamGetCaptureInfo gained graph_out in 12.3 as
// _v2 and took over the signature in 13.0).
inline cudaError_t capturing_graph(cudaStream_t stream, cudaStreamCaptureStatus* status,
                                   cudaGraph_t* graph) {
  unsigned long long id = 0;
#if CUDART_VERSION >= 13000
  return cudaStreamGetCaptureInfo(stream, status, &id, graph);
#else
  return cudaStreamGetCaptureInfo_v2(stream, status, &id, graph);
#endif
}

// cudaGetDriverEntryPoint is deprecated in CUDA 13; ByVersion exists from 12.5.
inline cudaError_t driver_entry_point(const char* symbol, void** fn, unsigned version) {
  cudaDriverEntryPointQueryResult status{};
#if CUDART_VERSION >= 12050
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, fn, version, cudaEnableDefault, &status);
#else
  (void)version;
  const cudaError_t err = cudaGetDriverEntryPoint(symbol, fn, cudaEnableDefault, &status);
#endif
  if (err == cudaSuccess && status != cudaDriverEntryPointSuccess) {
    *fn = nullptr;
    return cudaErrorSymbolNotFound;
  }
  return err;
}

}  // namespace graphcheck::cuda_compat
