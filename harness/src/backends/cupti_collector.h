#pragma once
// The CUPTI collector of the cuda backend (GRAPHCHECK_HAS_CUPTI): kernel launches, memcpy and
// memset operations and device memory allocations (cudaMalloc-level, CUPTI_ACTIVITY_KIND_MEMORY2)
// inside windows the backend opens around warm-up, capture and replay, with the graph-node ids
// of the kernels a replay launched.
//
// CUPTI allows one subscriber per process: start() refuses with CuptiBusy when another one (a
// profiler such as Nsight Systems, or a second collector) is active.

#include <cstdint>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

namespace graphcheck {

class CuptiBusy : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CuptiWindow {
  std::string name;
  std::uint64_t kernels = 0;
  std::uint64_t graph_kernels = 0;  // launched by a graph replay (graphNodeId != 0)
  std::set<std::uint64_t> graph_nodes;
  std::uint64_t memcpys = 0;
  std::uint64_t memsets = 0;
  std::uint64_t allocations = 0;
  std::uint64_t allocated_bytes = 0;
  std::uint64_t dropped = 0;  // records CUPTI dropped (buffers full)
};

class CuptiCollector {
 public:
  // Subscribes to CUPTI. Throws CuptiBusy naming the fix when another subscriber is active, and
  // std::runtime_error for any other CUPTI failure.
  static std::unique_ptr<CuptiCollector> start();
  ~CuptiCollector();
  CuptiCollector(const CuptiCollector&) = delete;  // move-only
  CuptiCollector& operator=(const CuptiCollector&) = delete;

  void begin_window(std::string name);
  // Flushes CUPTI's buffers and returns what the window recorded. The caller synchronises the
  // window's work first (cudaDeviceSynchronize): cuptiActivityFlushAll issues no CUDA
  // synchronisation, and a kernel still in flight is not (completely) recorded yet.
  [[nodiscard]] CuptiWindow end_window();

  struct State;  // what CUPTI's C callbacks reach (cupti_collector.cpp)

 private:
  CuptiCollector() = default;
  std::unique_ptr<State> m_state;
};

}  // namespace graphcheck
