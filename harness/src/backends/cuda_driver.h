#pragma once
// The CUDA driver functions the pointer audit needs, obtained at run time through the runtime's
// cudaGetDriverEntryPointByVersion: graphcheck links no libcuda, so its binaries start on a
// machine without a driver (CI) and only touch the driver once a CUDA device is in use.

#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace graphcheck {

struct CudaDriver {
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuGraphGetNodes_v10000 graph_get_nodes = nullptr;
  PFN_cuGraphNodeGetType_v10000 graph_node_get_type = nullptr;
  PFN_cuGraphKernelNodeGetParams_v12000 kernel_node_get_params = nullptr;
  PFN_cuGraphMemcpyNodeGetParams_v10000 memcpy_node_get_params = nullptr;
  PFN_cuGraphMemsetNodeGetParams_v10000 memset_node_get_params = nullptr;
  PFN_cuGraphChildGraphNodeGetGraph_v10000 child_graph_get_graph = nullptr;
  // Parameter layouts (driver 12.4+); null on an older driver: the audit then scans nothing it
  // cannot lay out and says so.
  PFN_cuFuncGetParamInfo_v12040 func_get_param_info = nullptr;
  PFN_cuKernelGetParamInfo_v12040 kernel_get_param_info = nullptr;
  PFN_cuFuncGetName_v12030 func_get_name = nullptr;
  PFN_cuKernelGetName_v12030 kernel_get_name = nullptr;

  // "" when every required function was found, else what is missing and why.
  std::string missing;

  [[nodiscard]] std::string error_string(CUresult result) const;
};

// Loaded once, on first use (which initialises the CUDA runtime: call it only with a device).
[[nodiscard]] const CudaDriver& cuda_driver();

}  // namespace graphcheck
