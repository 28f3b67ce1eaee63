#include "backends/cuda_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "backends/cuda_compat.h"

namespace graphcheck {

std::string CudaDriver::error_string(CUresult result) const {
  const char* text = nullptr;
  if (get_error_string && get_error_string(result, &text) == CUDA_SUCCESS && text) return text;
  return fmt::format("CUresult {}", static_cast<int>(result));
}

namespace {

template <class Fn>
void load(const char* symbol, unsigned version, Fn& fn, std::vector<std::string>* missing) {
  void* p = nullptr;
  const cudaError_t err = cuda_compat::driver_entry_point(symbol, &p, version);
  fn = reinterpret_cast<Fn>(p);
  if ((err != cudaSuccess || !p) && missing) {
    missing->push_back(fmt::format("{} ({})", symbol, cudaGetErrorString(err)));
  }
}

CudaDriver load_driver() {
  CudaDriver d;
  std::vector<std::string> missing;
  load("cuGetErrorString", 6000, d.get_error_string, &missing);
  load("cuGraphGetNodes", 10000, d.graph_get_nodes, &missing);
  load("cuGraphNodeGetType", 10000, d.graph_node_get_type, &missing);
  load("cuGraphKernelNodeGetParams", 12000, d.kernel_node_get_params, &missing);
  load("cuGraphMemcpyNodeGetParams", 10000, d.memcpy_node_get_params, &missing);
  load("cuGraphMemsetNodeGetParams", 10000, d.memset_node_get_params, &missing);
  load("cuGraphChildGraphNodeGetGraph", 10000, d.child_graph_get_graph, &missing);
  load("cuFuncGetParamInfo", 12040, d.func_get_param_info, nullptr);
  load("cuKernelGetParamInfo", 12040, d.kernel_get_param_info, nullptr);
  load("cuFuncGetName", 12030, d.func_get_name, nullptr);
  load("cuKernelGetName", 12030, d.kernel_get_name, nullptr);
  if (!missing.empty()) {
    d.missing = fmt::format("the CUDA driver lacks {}", fmt::join(missing, ", "));
  }
  return d;
}

}  // namespace

const CudaDriver& cuda_driver() {
  static const CudaDriver driver = load_driver();
  return driver;
}

}  // namespace graphcheck
