#include "backends/cuda_graph_audit.h"

#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <vector>

#include "backends/cuda_driver.h"

namespace graphcheck {
namespace {

// audit::extra_buffer() knows CU_LAUNCH_PARAM_END / _BUFFER_POINTER / _BUFFER_SIZE as 0, 1, 2:
// cuda.h defines them as those void* constants in every release (they are part of the ABI).

class Walker {
 public:
  Walker(const CudaDriver& driver, const audit::AuditRanges& ranges, audit::AuditResult& result)
      : m_driver(driver), m_ranges(ranges), m_result(result) {}

  void walk(CUgraph graph, int depth) {
    if (depth > 64) throw std::runtime_error("pointer audit: child graphs nested deeper than 64");
    std::size_t count = 0;
    check(m_driver.graph_get_nodes(graph, nullptr, &count), "cuGraphGetNodes");
    std::vector<CUgraphNode> nodes(count);
    if (count > 0) check(m_driver.graph_get_nodes(graph, nodes.data(), &count), "cuGraphGetNodes");
    for (CUgraphNode node : nodes) visit(node, depth);
  }

 private:
  void visit(CUgraphNode node, int depth) {
    const std::size_t ordinal = m_result.nodes++;
    CUgraphNodeType type{};
    check(m_driver.graph_node_get_type(node, &type), "cuGraphNodeGetType");
    switch (type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        kernel(node, ordinal);
        break;
      case CU_GRAPH_NODE_TYPE_MEMCPY: {
        ++m_result.memcpy_nodes;
        CUDA_MEMCPY3D p{};
        check(m_driver.memcpy_node_get_params(node, &p), "cuGraphMemcpyNodeGetParams");
        if (p.srcMemoryType == CU_MEMORYTYPE_DEVICE || p.srcMemoryType == CU_MEMORYTYPE_UNIFIED) {
          const std::uint64_t rows =
              std::max<std::size_t>(p.Height, 1) * std::max<std::size_t>(p.Depth, 1);
          const std::uint64_t pitch = p.srcPitch ? p.srcPitch : p.WidthInBytes;
          const std::uint64_t source =
              static_cast<std::uint64_t>(p.srcDevice) + p.srcXInBytes +
              pitch * (p.srcY + p.srcZ * std::max<std::size_t>(p.srcHeight, 1));
          const std::uint64_t bytes = rows == 1 ? p.WidthInBytes : 0;  // strided: extent unknown
          audit::audit_memcpy_source(ordinal, source, bytes, m_ranges, m_result);
        } else {
          note("memcpy nodes from host memory or CUDA arrays are not audited");
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMSET:
        ++m_result.memset_nodes;
        break;  // writes, reads nothing
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        ++m_result.child_graphs;
        CUgraph child = nullptr;
        check(m_driver.child_graph_get_graph(node, &child), "cuGraphChildGraphNodeGetGraph");
        walk(child, depth + 1);
        break;
      }
      case CU_GRAPH_NODE_TYPE_CONDITIONAL:
        ++m_result.ignored_nodes;
        note("conditional nodes' bodies are not audited");
        break;
      default:
        ++m_result.ignored_nodes;
        break;  // event record / wait, empty, host, mem alloc/free
    }
  }

  void kernel(CUgraphNode node, std::size_t ordinal) {
    ++m_result.kernel_nodes;
    CUDA_KERNEL_NODE_PARAMS p{};
    check(m_driver.kernel_node_get_params(node, &p), "cuGraphKernelNodeGetParams");
    if (p.kernelParams == nullptr) {
      if (auto buffer = audit::extra_buffer(const_cast<const void* const*>(p.extra))) {
        ++m_result.kernels_without_layout;  // one packed buffer: scanned word by word
        audit::audit_kernel_words(ordinal, *buffer, {}, m_ranges, m_result);
      }
      return;
    }
    std::vector<audit::ParamSlot> layout;
    try {
      layout = audit::walk_param_layout([&](std::size_t i) -> std::optional<audit::ParamSlot> {
        std::size_t offset = 0, size = 0;
        CUresult r = CUDA_ERROR_NOT_SUPPORTED;
        if (p.func && m_driver.func_get_param_info) {
          r = m_driver.func_get_param_info(p.func, i, &offset, &size);
        } else if (p.kern && m_driver.kernel_get_param_info) {
          r = m_driver.kernel_get_param_info(p.kern, i, &offset, &size);
        }
        if (r == CUDA_ERROR_INVALID_VALUE) return std::nullopt;  // past the last parameter
        if (r != CUDA_SUCCESS) throw std::runtime_error(m_driver.error_string(r));
        return audit::ParamSlot{offset, size};
      });
    } catch (const std::exception& e) {
      ++m_result.kernels_without_layout;
      note(
          fmt::format("kernels whose parameter layout the driver does not give are not audited "
                      "(cuFuncGetParamInfo / cuKernelGetParamInfo: {}; kernel {})",
                      e.what(), kernel_name(p)));
      return;
    }
    const std::vector<std::byte> image =
        audit::param_image(layout, const_cast<const void* const*>(p.kernelParams));
    audit::audit_kernel_words(ordinal, image, layout, m_ranges, m_result);
  }

  std::string kernel_name(const CUDA_KERNEL_NODE_PARAMS& p) const {
    const char* name = nullptr;
    if (p.func && m_driver.func_get_name) m_driver.func_get_name(&name, p.func);
    if (!name && p.kern && m_driver.kernel_get_name) m_driver.kernel_get_name(&name, p.kern);
    return name ? name : "(unnamed)";
  }

  void note(std::string text) {
    if (m_noted.insert(text.substr(0, 60)).second) m_result.notes.push_back(std::move(text));
  }

  void check(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) {
      throw std::runtime_error(
          fmt::format("pointer audit: {} failed: {}", what, m_driver.error_string(r)));
    }
  }

  const CudaDriver& m_driver;
  const audit::AuditRanges& m_ranges;
  audit::AuditResult& m_result;
  std::set<std::string> m_noted;
};

}  // namespace

audit::AuditResult audit_cuda_graph(cudaGraph_t graph, const audit::AuditRanges& ranges) {
  const CudaDriver& driver = cuda_driver();
  if (!driver.missing.empty()) throw std::runtime_error("pointer audit: " + driver.missing);
  audit::AuditResult result;
  Walker(driver, ranges, result).walk(reinterpret_cast<CUgraph>(graph), 0);
  return result;
}

}  // namespace graphcheck
