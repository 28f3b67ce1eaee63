#include "backends/cuda_backend.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "address_index.h"
#include "backends/cuda_compat.h"
#include "backends/cuda_driver.h"
#include "backends/cuda_graph_audit.h"
#include "backends/pointer_audit.h"
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
// At replay, an input whose storage was freed is counted (gc/cuda/liveness/dead_inputs).

namespace graphcheck {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(
        fmt::format("graphcheck cuda backend: {} failed: {}", what, cudaGetErrorString(err)));
  }
}

bool env_off(const char* name) {
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
thread_local LivenessLog* t_liveness = nullptr;

std::unique_ptr<at::ObserverContext> on_op_inputs(const at::RecordFunction& fn) {
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
// alive_since(moment) is the net growth of allocated bytes since that moment.
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
  [[nodiscard]] std::int64_t live_bytes() const override { return stat(false).current; }
  [[nodiscard]] std::int64_t alive_since(std::uint64_t moment) const override {
    if (moment >= m_moments.size()) return 0;
    return std::max<std::int64_t>(0, live_bytes() - m_moments[moment]);
  }
  [[nodiscard]] std::int64_t peak_bytes() const override { return stat(false).peak; }
  void reset_peak() override { c10::cuda::CUDACachingAllocator::resetPeakStats(m_device); }
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

// What every graph of a backend shares: the device, the capture stream, the pool, and where
// measurements go.
struct CudaShared {
  c10::Device device{c10::kCUDA, 0};
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, 0);
  decltype(at::cuda::graph_pool_handle()) pool{};
  std::vector<BackendMeasurement> measurements;
  std::vector<PendingTiming> timings;
#if GRAPHCHECK_HAS_CUPTI
  std::unique_ptr<CuptiCollector> cupti;
#endif

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
  void end_window(const char* phase, std::int64_t batch) {
#if GRAPHCHECK_HAS_CUPTI
    if (!cupti) return;
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

// ---- graphs -----------------------------------------------------------------------------------

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(CudaShared& shared, std::int64_t batch_size, std::unique_ptr<at::cuda::CUDAGraph> graph,
            TensorList inputs, TensorList outputs, std::vector<GraphRead> reads,
            LivenessLog liveness)
      : m_shared(shared),
        m_batch_size(batch_size),
        m_graph(std::move(graph)),
        m_inputs(std::move(inputs)),
        m_outputs(std::move(outputs)),
        m_reads(std::move(reads)),
        m_liveness(std::move(liveness)) {}

  [[nodiscard]] std::int64_t batch_size() const override { return m_batch_size; }
  [[nodiscard]] const TensorList& static_inputs() const override { return m_inputs; }
  [[nodiscard]] const TensorList& static_outputs() const override { return m_outputs; }
  [[nodiscard]] const std::vector<GraphRead>& reads() const override { return m_reads; }

  void replay() override {
    std::int64_t dead = 0;
    for (auto& [address, in] : m_liveness.inputs) {
      if (in.storage.expired()) ++dead;
    }
    m_shared.measure("gc/cuda/liveness/dead_inputs", static_cast<double>(dead), "tensors", "replay",
                     m_batch_size);
    // The static inputs were written on the current stream; replay on the capture stream.
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(m_shared.device.index());
    cudaEvent_t ready = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    // Destroyed on every way out, a throwing CUDA call included.
    const std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> ready_owner(ready, &cudaEventDestroy);
    check_cuda(cudaEventRecord(ready, current.stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(m_shared.stream.stream(), ready, 0), "cudaStreamWaitEvent");
    {
      const c10::cuda::CUDAStreamGuard guard(m_shared.stream);
      m_shared.begin_window("replay");
      PendingTiming t{"replay", m_batch_size, std::make_unique<EventTimer>()};
      t.timer->start(m_shared.stream.stream());
      m_graph->replay();
      t.timer->stop(m_shared.stream.stream());
      m_shared.timings.push_back(std::move(t));
      m_shared.end_window("replay", m_batch_size);
    }
    // Later work on the current stream (reading the outputs) waits for the replay.
    check_cuda(cudaEventRecord(ready, m_shared.stream.stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(current.stream(), ready, 0), "cudaStreamWaitEvent");
  }

 private:
  CudaShared& m_shared;
  std::int64_t m_batch_size;
  std::unique_ptr<at::cuda::CUDAGraph> m_graph;
  TensorList m_inputs;
  TensorList m_outputs;
  std::vector<GraphRead> m_reads;
  LivenessLog m_liveness;
};

// One capture of the forward: the graph, its outputs, and the audit of its cudaGraph_t.
struct Capture {
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  TensorList outputs;
  audit::AuditResult audit;
};

class CudaBackend final : public GraphBackend {
 public:
  explicit CudaBackend(c10::DeviceIndex device) : m_meter(device) {
    m_shared.device = c10::Device(c10::kCUDA, device);
    m_shared.stream = c10::cuda::getStreamFromPool(false, device);
    m_shared.pool = at::cuda::graph_pool_handle();
    m_audit = !env_off("GRAPHCHECK_AUDIT");
    m_liveness = !env_off("GRAPHCHECK_LIVENESS");
  }

  void start_cupti() {
#if GRAPHCHECK_HAS_CUPTI
    if (!env_off("GRAPHCHECK_CUPTI")) m_shared.cupti = CuptiCollector::start();
#endif
  }
  [[nodiscard]] std::string mechanisms() const {
    std::vector<std::string> m;
    const CudaDriver& d = cuda_driver();
    if (!m_audit) {
      m.push_back("pointer audit off (GRAPHCHECK_AUDIT=0)");
    } else if (!d.missing.empty()) {
      m.push_back(fmt::format("pointer audit unavailable ({})", d.missing));
    } else {
      m.push_back(fmt::format(
          "pointer audit of the captured graph ({}; kernel parameter layouts from {}; two captures "
          "intersected)",
          GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH ? "CUDAGraph keep_graph + raw_cuda_graph()"
                                              : "cudaStreamGetCaptureInfo before capture_end",
          d.func_get_param_info
              ? "cuFuncGetParamInfo/cuKernelGetParamInfo"
              : "nowhere: the driver is older than 12.4, kernel nodes are not audited"));
    }
    m.push_back(m_liveness ? "input liveness (a C++ counterpart of PyTorch's check_input_liveness)"
                           : "input liveness off (GRAPHCHECK_LIVENESS=0)");
#if GRAPHCHECK_HAS_CUPTI
    m.push_back(m_shared.cupti ? "CUPTI collector" : "CUPTI collector off (GRAPHCHECK_CUPTI=0)");
#else
    m.push_back("no CUPTI collector (built without CUPTI)");
#endif
    m.push_back("CUDA-event timing");
    return fmt::format("{}", fmt::join(m, ", "));
  }

  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] bool exact() const override { return false; }
  // Replay and eager may pick different kernels (split-K, atomics): a small floor, never 0.
  [[nodiscard]] double min_tolerance() const override { return 1e-6; }
  [[nodiscard]] bool keeps_storages_alive() const override { return false; }
  [[nodiscard]] MemoryMeter& memory_meter() override { return m_meter; }
  [[nodiscard]] c10::Device device() const override { return m_shared.device; }
  void synchronize() override { check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  std::vector<BackendMeasurement> take_measurements() override {
    synchronize();
    for (PendingTiming& t : m_shared.timings) {
      m_shared.measure(fmt::format("gc/cuda/{}/gpu_seconds", t.phase), t.timer->seconds(), "s",
                       t.phase, t.batch_size);
    }
    m_shared.timings.clear();
    m_shared.measure("gc/cuda/memory/allocated_bytes", static_cast<double>(m_meter.live_bytes()),
                     "bytes", "scenario", 0);
    m_shared.measure("gc/cuda/memory/reserved_bytes", static_cast<double>(m_meter.reserved_bytes()),
                     "bytes", "scenario", 0);
    m_shared.measure("gc/cuda/memory/pool_bytes", static_cast<double>(pool_bytes()), "bytes",
                     "scenario", 0);
    return std::exchange(m_shared.measurements, {});
  }

  std::unique_ptr<CapturedGraph> capture(LifecycleModel& model, const TensorList& example_inputs,
                                         std::int64_t batch_size) override {
    torch::NoGradGuard no_grad;
    const c10::cuda::CUDAGuard device_guard(m_shared.device);
    TensorList inputs;
    for (const auto& t : example_inputs) inputs.push_back(t.to(m_shared.device).clone());

    // Warm-up on a side stream (lazy initialisation of cuBLAS handles and workspaces must not
    // happen during capture), then capture on the capture stream.
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(m_shared.device.index());
    check_cuda(cudaStreamSynchronize(current.stream()), "cudaStreamSynchronize");
    {
      const c10::cuda::CUDAStream side =
          c10::cuda::getStreamFromPool(false, m_shared.device.index());
      const c10::cuda::CUDAStreamGuard guard(side);
      m_shared.begin_window("warm-up");
      PendingTiming t{"warm-up", batch_size, std::make_unique<EventTimer>()};
      t.timer->start(side.stream());
      for (int i = 0; i < 2; ++i) (void)model.forward_all(inputs);
      t.timer->stop(side.stream());
      m_shared.timings.push_back(std::move(t));
      check_cuda(cudaStreamSynchronize(side.stream()), "cudaStreamSynchronize");
      m_shared.end_window("warm-up", batch_size);
    }

    LivenessLog liveness;
    m_shared.begin_window("capture");
    Capture first = capture_once(model, inputs, batch_size, m_liveness ? &liveness : nullptr);
    m_shared.end_window("capture", batch_size);

    std::vector<GraphRead> reads;
    if (m_audit && cuda_driver().missing.empty()) {
      // Note [Pointer audit]: a second capture rules out words that only look like pointers.
      Capture second = capture_once(model, inputs, batch_size, nullptr);
      const std::vector<audit::AuditHit> kept = audit::confirm(first.audit, second.audit);
      second = Capture{};
      reads = to_reads(audit::reads_of(kept), liveness, nullptr);
      report_audit(first.audit, kept, reads, liveness, ranges(model, inputs), batch_size);
    } else {
      const audit::AuditRanges r = ranges(model, inputs);
      reads = to_reads({}, liveness, &r);
    }
    if (!first.graph) throw NotCapturable("the CUDA graph capture produced no graph");
#if GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH
    first.graph->instantiate();
#endif
    return std::make_unique<CudaGraph>(m_shared, batch_size, std::move(first.graph),
                                       std::move(inputs), std::move(first.outputs),
                                       std::move(reads), std::move(liveness));
  }

 private:
  Capture capture_once(LifecycleModel& model, const TensorList& inputs, std::int64_t batch_size,
                       LivenessLog* liveness) {
    Capture c;
#if GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH
    c.graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/true);
#else
    c.graph = std::make_unique<at::cuda::CUDAGraph>();
#endif
    const c10::cuda::CUDAStreamGuard guard(m_shared.stream);
    c.graph->capture_begin(m_shared.pool);
    try {
      std::optional<LivenessTracker> tracker;
      if (liveness) tracker.emplace(*liveness);
      c.outputs = model.forward_all(inputs);
    } catch (const std::exception& e) {
      abandon(c);
      throw NotCapturable(fmt::format(
          "the forward failed during CUDA graph capture at batch size {}: {} (a host sync such as "
          "item() or .cpu(), a copy between host and device, or a synchronising allocation cannot "
          "be captured; keep values on the device)",
          batch_size, e.what()));
    }
    if (c.outputs.empty()) {
      abandon(c);
      throw NotCapturable("forward must return at least one tensor to be captured");
    }
    const auto end_capture = [&] {
      try {
        c.graph->capture_end();
      } catch (const std::exception& e) {
        abandon(c);
        throw NotCapturable(
            fmt::format("CUDA graph capture at batch size {} failed: {}", batch_size, e.what()));
      }
    };
#if GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH
    end_capture();
    if (m_audit && cuda_driver().missing.empty()) {
      c.audit = audit_cuda_graph(c.graph->raw_cuda_graph(), ranges(model, inputs));
    }
#else
    if (m_audit && cuda_driver().missing.empty()) {
      cudaStreamCaptureStatus status{};
      cudaGraph_t g = nullptr;
      check_cuda(cuda_compat::capturing_graph(m_shared.stream.stream(), &status, &g),
                 "cudaStreamGetCaptureInfo");
      if (status == cudaStreamCaptureStatusActive && g)
        c.audit = audit_cuda_graph(g, ranges(model, inputs));
    }
    end_capture();
#endif
    return c;
  }

  // Ends a failed capture so that the stream and the pool are usable again.
  void abandon(Capture& c) {
    cudaStreamCaptureStatus status{};
    if (cudaStreamIsCapturing(m_shared.stream.stream(), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
      try {
        c.graph->capture_end();
      } catch (const std::exception&) {
      }
    }
    c.outputs.clear();
    c.graph.reset();
    (void)cudaGetLastError();  // clear the capture's sticky error for the next CUDA call
  }

  // Note [Pointer audit]: the ranges a word is classified against.
  audit::AuditRanges ranges(LifecycleModel& model, const TensorList& inputs) const {
    audit::AuditRanges r;
    for (const auto& t : inputs) {
      r.add(reinterpret_cast<std::uint64_t>(t.data_ptr()), tensor_extent_bytes(t),
            audit::RangeKind::input);
    }
    for (const NamedTensor& t : live_tensors(model)) {
      if (!t.tensor.defined() || !t.tensor.is_cuda() || !t.tensor.has_storage()) continue;
      r.add(reinterpret_cast<std::uint64_t>(t.tensor.data_ptr()), tensor_extent_bytes(t.tensor),
            audit::RangeKind::tensor);
    }
    for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot().segments) {
      if (seg.device != m_shared.device.index()) continue;
      r.add(seg.address, seg.total_size,
            seg.owner_private_pool_id == m_shared.pool ? audit::RangeKind::pool
                                                       : audit::RangeKind::segment);
    }
    return r;
  }

  [[nodiscard]] std::int64_t pool_bytes() const {
    std::int64_t bytes = 0;
    for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot().segments) {
      if (seg.device == m_shared.device.index() && seg.owner_private_pool_id == m_shared.pool) {
        bytes += static_cast<std::int64_t>(seg.total_size);
      }
    }
    return bytes;
  }

  // Audit reads, described with what the liveness log knows of the same address. Without an
  // audit (switched off, or a driver without the functions it needs), the liveness log's inputs
  // that lie in the model's tensors or in undeclared allocator memory are the reads instead.
  static std::vector<GraphRead> to_reads(const std::vector<audit::AuditRead>& audited,
                                         const LivenessLog& liveness,
                                         const audit::AuditRanges* without_audit) {
    std::vector<GraphRead> reads;
    auto add = [&](std::uint64_t address, std::uint64_t bytes, const TrackedInput* known) {
      GraphRead r;
      r.address = reinterpret_cast<const void*>(address);
      r.bytes = bytes;
      if (known) {
        r.bytes = known->bytes;
        r.dtype = known->dtype;
        r.sizes = known->sizes;
        r.strides = known->strides;
      }
      reads.push_back(std::move(r));
    };
    if (without_audit) {
      for (const auto& [address, in] : liveness.inputs) {
        const auto kind = without_audit->classify(address);
        if (kind == audit::RangeKind::tensor || kind == audit::RangeKind::segment) {
          add(address, in.bytes, &in);
        }
      }
      return reads;
    }
    for (const audit::AuditRead& a : audited) {
      auto it = liveness.inputs.find(a.address);
      add(a.address, a.bytes, it == liveness.inputs.end() ? nullptr : &it->second);
    }
    return reads;
  }

  void report_audit(const audit::AuditResult& first, const std::vector<audit::AuditHit>& kept,
                    const std::vector<GraphRead>& reads, const LivenessLog& liveness,
                    const audit::AuditRanges& ranges, std::int64_t batch) {
    const char* p = "capture";
    m_shared.measure("gc/cuda/audit/nodes", static_cast<double>(first.nodes), "nodes", p, batch);
    m_shared.measure("gc/cuda/audit/kernel_nodes", static_cast<double>(first.kernel_nodes), "nodes",
                     p, batch);
    m_shared.measure("gc/cuda/audit/kernels_without_layout",
                     static_cast<double>(first.kernels_without_layout), "nodes", p, batch);
    m_shared.measure("gc/cuda/audit/memcpy_nodes", static_cast<double>(first.memcpy_nodes), "nodes",
                     p, batch);
    m_shared.measure("gc/cuda/audit/memset_nodes", static_cast<double>(first.memset_nodes), "nodes",
                     p, batch);
    m_shared.measure("gc/cuda/audit/child_graphs", static_cast<double>(first.child_graphs),
                     "graphs", p, batch);
    m_shared.measure("gc/cuda/audit/words_scanned", static_cast<double>(first.words_scanned),
                     "words", p, batch);
    m_shared.measure("gc/cuda/audit/hits", static_cast<double>(first.hits.size()), "words", p,
                     batch);
    m_shared.measure("gc/cuda/audit/coincidences_ruled_out",
                     static_cast<double>(first.hits.size() - kept.size()), "words", p, batch);
    std::size_t pool = 0;
    for (const auto& h : kept) pool += h.kind == audit::RangeKind::pool;
    m_shared.measure("gc/cuda/audit/pool_words", static_cast<double>(pool), "words", p, batch);
    m_shared.measure("gc/cuda/audit/reads", static_cast<double>(reads.size()), "reads", p, batch);
    // The second opinion: model tensors the dispatched ops read that the audit did not find.
    std::set<std::uint64_t> audited;
    for (const auto& r : reads) audited.insert(reinterpret_cast<std::uint64_t>(r.address));
    std::size_t liveness_only = 0;
    for (const auto& [address, in] : liveness.inputs) {
      // Only the model's state: op inputs produced inside the capture live in the pool.
      const auto kind = ranges.classify(address);
      const bool state = kind == audit::RangeKind::tensor || kind == audit::RangeKind::segment;
      liveness_only += state && !audited.count(address);
    }
    m_shared.measure("gc/cuda/liveness/inputs", static_cast<double>(liveness.inputs.size()),
                     "tensors", p, batch);
    m_shared.measure("gc/cuda/liveness/not_in_audit", static_cast<double>(liveness_only), "tensors",
                     p, batch);
    for (std::size_t i = 0; i < first.notes.size(); ++i) {
      m_shared.measure(fmt::format("gc/cuda/audit/note/{}", first.notes[i]), 1, "note", p, batch);
    }
  }

  CudaShared m_shared;
  CudaMemoryMeter m_meter;
  bool m_audit = true;
  bool m_liveness = true;
};

}  // namespace

CudaAvailability cuda_availability() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return {false,
            fmt::format("no usable CUDA device (cudaGetDeviceCount: {})", cudaGetErrorString(err))};
  }
  if (count == 0) return {false, "no CUDA device (cudaGetDeviceCount found 0)"};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return {true, "CUDA device 0"};
  return {true, fmt::format("CUDA device 0 ({}, sm_{}{}, of {})", prop.name, prop.major, prop.minor,
                            count)};
}

std::unique_ptr<GraphBackend> make_cuda_backend(std::string& mechanisms) {
  const CudaAvailability a = cuda_availability();
  if (!a.usable) {
    throw std::invalid_argument(fmt::format(
        "backend 'cuda' is not available: {}; run on a machine with a CUDA GPU and driver, or use "
        "--backend emulated (or auto)",
        a.reason));
  }
  auto backend = std::make_unique<CudaBackend>(0);
#if GRAPHCHECK_HAS_CUPTI
  try {
    backend->start_cupti();
  } catch (const CuptiBusy& e) {
    throw std::invalid_argument(fmt::format("backend 'cuda': {}", e.what()));
  }
#endif
  mechanisms = fmt::format("{}; {}", a.reason, backend->mechanisms());
  return backend;
}

}  // namespace graphcheck
