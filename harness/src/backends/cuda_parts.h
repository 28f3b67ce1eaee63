#pragma once
// The cuda backend's parts below its graphs (cuda_backend.cpp): CUDA error checks, the input
// liveness tracker (Note [Input liveness]), the memory meter over the caching allocator's stats
// with its uncounted stretches (Note [Uncounted forwards]), event timing, and what the backend's
// graphs share (CudaShared: streams, pool, timings, the CUPTI windows). Internal to
// cuda_backend.cpp, its one includer. GRAPHCHECK_HAS_CUDA builds only.

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <torch/types.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda_compat.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/hooks.h"
#include "torch_compat.h"
#if GRAPHCHECK_HAS_CUPTI
#include "backends/cupti_collector.h"
#endif

// Note [Input liveness]
// PyTorch 2.14's check_input_liveness (torch.cuda.CUDAGraph.capture_begin) is a Python
// TorchDispatchMode: it records every tensor an op reads during capture that the capture did not
// produce, and at replay raises when one of them was freed. libtorch has no C++ entry point for
// it, so the backend carries the same idea in C++: a thread-local RecordFunction callback with
// inputs records each CUDA tensor input of every op dispatched during capture (address, extent,
// dtype, shape and a weak reference to its storage). It is a second opinion beside the pointer
// audit: it sees what dispatched ops read (with dtypes and shapes the audit cannot know) but not
// raw kernel launches, while the audit sees every kernel's parameters but only bare addresses.
// The inputs the capture produced itself (they lie in the graph's pool) are dropped once it ends.
// At replay, an input whose storage was freed is counted (gc/cuda/liveness/dead_inputs).

// Note [Uncounted forwards]
// The driver's capture window (on_capture_begin .. on_capture_end, around capture()) is where the
// hooks and memory probes take the capture phase's counts. The emulated backend runs the forward
// once in it (the trace). The cuda backend runs it four times: two warm-up forwards on a side
// stream (lazy cuBLAS handles and workspaces must not be created during capture), the capture,
// and the pointer audit's confirming second capture. Only the capture counts: the others run
// with hook calls discarded and outside the memory meter's readings (their peak does not count,
// and what they leave allocated, such as the warm-up stream's cuBLAS workspace, is subtracted
// from the live bytes), so both backends count the same one forward.

namespace graphcheck::cuda_parts {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(
        fmt::format("graphcheck cuda backend: {} failed: {}", what, cudaGetErrorString(err)));
  }
}

inline bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && (std::string(v) == "0" || std::string(v) == "off" || std::string(v) == "OFF");
}

// ---- Note [Input liveness] ------------------------------------------------------------------

struct TrackedInput {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  std::vector<std::int64_t> sizes, strides;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage{c10::intrusive_ptr<c10::StorageImpl>()};
};

struct LivenessLog {
  std::map<std::uint64_t, TrackedInput> inputs;  // by address
};
inline thread_local LivenessLog* t_liveness = nullptr;

inline std::unique_ptr<at::ObserverContext> on_op_inputs(const at::RecordFunction& fn) {
  if (!t_liveness) return nullptr;
  for (const c10::IValue& v : fn.inputs()) {
    if (!v.isTensor()) continue;
    const at::Tensor& t = v.toTensor();
    if (!t.defined() || !t.is_cuda() || !t.has_storage() || t.numel() == 0) continue;
    const auto address = reinterpret_cast<std::uint64_t>(t.data_ptr());
    if (t_liveness->inputs.count(address)) continue;
    TrackedInput in;
    in.address = address;
    in.bytes = tensor_extent_bytes(t);
    in.dtype = t.scalar_type();
    in.sizes = t.sizes().vec();
    in.strides = t.strides().vec();
    in.storage = c10::weak_intrusive_ptr<c10::StorageImpl>(
        c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(t.storage().unsafeGetStorageImpl()));
    t_liveness->inputs.emplace(address, std::move(in));
  }
  return nullptr;
}

class LivenessTracker {
 public:
  explicit LivenessTracker(LivenessLog& log)
      : m_handle(at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op_inputs)
                                                .needsInputs(true)
                                                .scopes({at::RecordScope::FUNCTION}))) {
    t_liveness = &log;
  }
  ~LivenessTracker() {
    at::removeCallback(m_handle);
    t_liveness = nullptr;
  }
  LivenessTracker(const LivenessTracker&) = delete;  // move-only
  LivenessTracker& operator=(const LivenessTracker&) = delete;

 private:
  at::CallbackHandle m_handle;
};

// ---- memory -----------------------------------------------------------------------------------

// The CUDA caching allocator's device stats. Allocations are not individually attributed:
// alive_since(moment) is the net growth of allocated bytes since that moment. Every reading leaves
// out what ran between begin_uncounted() and end_uncounted() (Note [Uncounted forwards]).
class CudaMemoryMeter final : public MemoryMeter {
 public:
  explicit CudaMemoryMeter(c10::DeviceIndex device) : m_device(device) {}
  [[nodiscard]] std::string name() const override {
    return "cuda caching allocator (device stats)";
  }
  void start() override {}
  void stop() override {}
  [[nodiscard]] std::uint64_t now() const override {
    m_moments.push_back(live_bytes());
    return m_moments.size() - 1;
  }
  [[nodiscard]] std::int64_t live_bytes() const override {
    return stat(false).current - m_uncounted;
  }
  [[nodiscard]] std::int64_t alive_since(std::uint64_t moment) const override {
    if (moment >= m_moments.size()) return 0;
    return std::max<std::int64_t>(0, live_bytes() - m_moments[moment]);
  }
  // The allocator's peak since the last reset (reset_peak() or end_uncounted(), between which
  // m_uncounted does not change), or the one carried over an uncounted stretch.
  [[nodiscard]] std::int64_t peak_bytes() const override {
    return std::max(m_peak_before_uncounted, stat(false).peak - m_uncounted);
  }
  void reset_peak() override {
    c10::cuda::CUDACachingAllocator::resetPeakStats(m_device);
    m_peak_before_uncounted = 0;
  }
  // Not nested.
  void begin_uncounted() {
    m_peak_before_uncounted = peak_bytes();
    m_uncounted_from = stat(false).current;
  }
  void end_uncounted() {
    m_uncounted += stat(false).current - m_uncounted_from;
    c10::cuda::CUDACachingAllocator::resetPeakStats(m_device);  // the stretch's peak is gone
  }
  // The allocator's own figures, uncounted stretches included.
  [[nodiscard]] std::int64_t allocated_bytes() const { return stat(false).current; }
  [[nodiscard]] std::int64_t reserved_bytes() const { return stat(true).current; }

 private:
  struct Stat {
    std::int64_t current = 0, peak = 0;
  };
  [[nodiscard]] Stat stat(bool reserved) const {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(m_device);
    const auto& s =
        reserved ? stats.reserved_bytes[0] : stats.allocated_bytes[0];  // [0]: aggregate
    return {s.current, s.peak};
  }
  c10::DeviceIndex m_device;
  mutable std::vector<std::int64_t> m_moments;
  std::int64_t m_uncounted = 0;  // bytes uncounted stretches left allocated
  std::int64_t m_uncounted_from = 0;
  std::int64_t m_peak_before_uncounted = 0;
};

// Note [Uncounted forwards]: hook calls discarded and memory left out while it lives.
class Uncounted {
 public:
  explicit Uncounted(CudaMemoryMeter& meter) : m_meter(meter), m_hooks(m_discard) {
    m_meter.begin_uncounted();
  }
  ~Uncounted() { m_meter.end_uncounted(); }
  Uncounted(const Uncounted&) = delete;  // move-only
  Uncounted& operator=(const Uncounted&) = delete;

 private:
  class Discard final : public HookSink {
   public:
    void on_hook(const void*, std::string_view) override {}
  };
  CudaMemoryMeter& m_meter;
  Discard m_discard;
  HookSinkScope m_hooks;  // after m_discard: installs it
};

// ---- timing -----------------------------------------------------------------------------------

// A pair of CUDA events around work on a stream; read once the stream is synchronised.
class EventTimer {
 public:
  EventTimer() {
    check_cuda(cudaEventCreate(&m_start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&m_end), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(m_start);
    cudaEventDestroy(m_end);
  }
  EventTimer(const EventTimer&) = delete;  // move-only
  EventTimer& operator=(const EventTimer&) = delete;
  void start(cudaStream_t s) { check_cuda(cudaEventRecord(m_start, s), "cudaEventRecord"); }
  void stop(cudaStream_t s) { check_cuda(cudaEventRecord(m_end, s), "cudaEventRecord"); }
  [[nodiscard]] double seconds() const {
    float ms = 0;
    check_cuda(cudaEventSynchronize(m_end), "cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, m_start, m_end), "cudaEventElapsedTime");
    return ms / 1000.0;
  }

 private:
  cudaEvent_t m_start = nullptr, m_end = nullptr;
};

struct PendingTiming {
  std::string phase;
  std::int64_t batch_size = 0;
  std::unique_ptr<EventTimer> timer;
};

// Note [A pool per run of graphs]: the graphs a backend captures share one private pool of the
// caching allocator while any of them lives, as a server's graphs of every batch size do. The
// allocator keeps a pool's use count (CUDACachingAllocator beginAllocateToPool or
// create_or_incref_pool, releasePool), and a pool whose graphs are all gone is only marked
// freeable: a capture into it later trips its internal assert (use_count > 0). A pass's graphs all
// go when the pass ends, so the next capture after that takes a fresh pool.
class PoolUse {
 public:
  PoolUse() = default;
  explicit PoolUse(int& graphs) : m_graphs(&graphs) { ++graphs; }
  PoolUse(PoolUse&& other) noexcept : m_graphs(std::exchange(other.m_graphs, nullptr)) {}
  PoolUse& operator=(PoolUse&& other) noexcept {
    if (this != &other) {
      release();
      m_graphs = std::exchange(other.m_graphs, nullptr);
    }
    return *this;
  }
  ~PoolUse() { release(); }
  PoolUse(const PoolUse&) = delete;
  PoolUse& operator=(const PoolUse&) = delete;

 private:
  void release() noexcept {
    if (m_graphs) --*m_graphs;
    m_graphs = nullptr;
  }
  int* m_graphs = nullptr;  // the live graphs of the shared pool
};

// What every graph of a backend shares: the device, the capture stream, the pool, and where
// measurements go.
struct CudaShared {
  c10::Device device{c10::kCUDA, 0};
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
  // The pointer audit's confirming capture (Note [Pointer audit]): its graph is dropped while the
  // first lives, and the reset() of a graph frees its capture stream's cuBLAS workspaces.
  c10::cuda::CUDAStream confirm_stream = c10::cuda::getStreamFromPool(false, 0);
  decltype(at::cuda::graph_pool_handle()) pool{};
  int pool_graphs = 0;      // graphs captured into `pool` (capture_end() returned) still alive
  bool pool_begun = false;  // a capture has begun into `pool`
  std::vector<BackendMeasurement> measurements;
  std::vector<PendingTiming> timings;
#if GRAPHCHECK_HAS_CUPTI
  std::unique_ptr<CuptiCollector> cupti;
#endif

  // The pool for the next capture (Note [A pool per run of graphs]).
  decltype(at::cuda::graph_pool_handle()) pool_for_capture() {
    if (pool_begun && pool_graphs == 0) {
      // The old pool, freeable now, holds its segments until the cache is emptied: one pool's
      // worth of reserved device memory per capturing pass otherwise.
      check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      c10::cuda::CUDACachingAllocator::emptyCache();
      pool = at::cuda::graph_pool_handle();
    }
    pool_begun = true;
    return pool;
  }

  void measure(std::string tag, double value, std::string unit, std::string phase,
               std::int64_t batch) {
    measurements.push_back({std::move(tag), value, std::move(unit), std::move(phase), batch});
  }
  void begin_window(const char* name) {
#if GRAPHCHECK_HAS_CUPTI
    if (cupti) cupti->begin_window(name);
#else
    (void)name;
#endif
  }
  // Ends a window without reading it (a throw left it open): the next window would count its
  // activity as its own.
  void discard_window() noexcept {
#if GRAPHCHECK_HAS_CUPTI
    if (!cupti) return;
    (void)cudaDeviceSynchronize();
    try {
      (void)cupti->end_window();
    } catch (const std::exception&) {
    }
#endif
  }
  void end_window(const char* phase, std::int64_t batch) {
#if GRAPHCHECK_HAS_CUPTI
    if (!cupti) return;
    // cuptiActivityFlushAll "doesn't issue any CUDA synchronization calls" and a record is
    // complete only once its activity is (cupti_activity.h): without this, the kernels of a
    // replay still in flight would be missing from its window.
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const CuptiWindow w = cupti->end_window();
    const std::string p = phase;
    measure(fmt::format("gc/cupti/{}/kernels", p), static_cast<double>(w.kernels), "launches", p,
            batch);
    measure(fmt::format("gc/cupti/{}/graph_kernels", p), static_cast<double>(w.graph_kernels),
            "launches", p, batch);
    measure(fmt::format("gc/cupti/{}/graph_nodes", p), static_cast<double>(w.graph_nodes.size()),
            "nodes", p, batch);
    measure(fmt::format("gc/cupti/{}/memcpys", p), static_cast<double>(w.memcpys), "ops", p, batch);
    measure(fmt::format("gc/cupti/{}/memsets", p), static_cast<double>(w.memsets), "ops", p, batch);
    measure(fmt::format("gc/cupti/{}/allocations", p), static_cast<double>(w.allocations),
            "allocations", p, batch);
    measure(fmt::format("gc/cupti/{}/allocated_bytes", p), static_cast<double>(w.allocated_bytes),
            "bytes", p, batch);
    if (w.dropped)
      measure(fmt::format("gc/cupti/{}/dropped_records", p), static_cast<double>(w.dropped),
              "records", p, batch);
#else
    (void)phase;
    (void)batch;
#endif
  }
};

// A CUPTI window that every way out closes: close() reads it, a throw discards it.
class WindowScope {
 public:
  WindowScope(CudaShared& shared, const char* phase, std::int64_t batch)
      : m_shared(shared), m_phase(phase), m_batch(batch) {
    shared.begin_window(phase);
  }
  ~WindowScope() {
    if (!m_closed) m_shared.discard_window();
  }
  WindowScope(const WindowScope&) = delete;
  WindowScope& operator=(const WindowScope&) = delete;
  void close() {
    m_shared.end_window(m_phase, m_batch);
    m_closed = true;
  }

 private:
  CudaShared& m_shared;
  const char* m_phase;
  std::int64_t m_batch;
  bool m_closed = false;
};

}  // namespace graphcheck::cuda_parts
