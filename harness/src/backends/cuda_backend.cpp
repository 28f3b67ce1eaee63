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
#include "backends/cuda_parts.h"
#include "backends/cuda_driver.h"
#include "backends/cuda_graph_audit.h"
#include "backends/pointer_audit.h"
#include "graphcheck/hooks.h"
#include "torch_compat.h"
#if GRAPHCHECK_HAS_HOST_ALLOCATOR_POOLS
#include <ATen/core/CachingHostAllocator.h>
#endif
#if GRAPHCHECK_HAS_CUPTI
#include "backends/cupti_collector.h"
#endif

// Note [Failed capture]
// at::cuda::CUDAGraph::capture_begin() registers the caching allocator's routing of the capture
// stream's allocations into the graph's private pool (CUDACachingAllocator::beginAllocateToPool,
// before cudaStreamBeginCapture; from libtorch 2.11 the pinned host allocator's too), and only
// capture_end() ends it (endAllocateToPool), after its stream check and, in the releases this
// builds against, after AT_CUDA_CHECK(cudaStreamEndCapture); the graph's destructor (reset())
// does not (ATen/cuda/CUDAGraph.cpp). A capture that the forward invalidated (a host sync) makes
// cudaStreamEndCapture fail, so capture_end() throws with the routing still registered: its
// filter, a lambda over the destroyed CUDAGraph, is then called on every later allocation, the
// allocator defers reclaiming cross-stream frees while any routing is registered, and the next
// capture_begin() into the same pool is refused ("already recording to mempool_id"). CaptureScope
// ends what a capture that did not end cleanly left: the stream's capture, then the routing. (The
// pool's use count that capture_begin() took stays taken: releasing it from outside could release
// it twice. The next capture, once no graph of that pool lives, takes a fresh pool: Note [A pool
// per run of graphs], backends/cuda_parts.h.)

namespace graphcheck {
namespace {

using namespace cuda_parts;  // backends/cuda_parts.h

// ---- graphs -----------------------------------------------------------------------------------

class CudaGraph final : public CapturedGraph {
 public:
  CudaGraph(CudaShared& shared, std::int64_t batch_size, PoolUse pool_use, std::unique_ptr<at::cuda::CUDAGraph> graph,
            TensorList inputs, TensorList outputs, std::vector<GraphRead> reads,
            LivenessLog liveness)
      : m_shared(shared),
        m_batch_size(batch_size),
        m_pool_use(std::move(pool_use)),
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
      WindowScope window(m_shared, "replay", m_batch_size);
      PendingTiming t{"replay", m_batch_size, std::make_unique<EventTimer>()};
      t.timer->start(m_shared.stream.stream());
      m_graph->replay();
      t.timer->stop(m_shared.stream.stream());
      m_shared.timings.push_back(std::move(t));
      window.close();
    }
    // Later work on the current stream (reading the outputs) waits for the replay.
    check_cuda(cudaEventRecord(ready, m_shared.stream.stream()), "cudaEventRecord");
    check_cuda(cudaStreamWaitEvent(current.stream(), ready, 0), "cudaStreamWaitEvent");
  }

 private:
  CudaShared& m_shared;
  std::int64_t m_batch_size;
  PoolUse m_pool_use;  // Note [A pool per run of graphs]
  std::unique_ptr<at::cuda::CUDAGraph> m_graph;
  TensorList m_inputs;
  TensorList m_outputs;
  std::vector<GraphRead> m_reads;
  LivenessLog m_liveness;
};

// One capture of the forward: the graph, its outputs, and the audit of its cudaGraph_t.
struct Capture {
  PoolUse pool_use;  // from capture_end()'s return (Note [A pool per run of graphs])
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  TensorList outputs;
  audit::AuditResult audit;
};

// Note [Failed capture]: unless ended() was called (capture_end() returned), ends on the way out
// the capture stream's capture and the allocator's routing into the pool, then drops the graph.
// Made after the CUDAStreamGuard to the capture stream (capture_end() checks the current stream).
class CaptureScope {
 public:
  CaptureScope(Capture& capture, const CudaShared& shared, cudaStream_t stream)
      : m_capture(capture), m_shared(shared), m_stream(stream) {}
  ~CaptureScope() {
    if (!m_ended) abandon();
  }
  CaptureScope(const CaptureScope&) = delete;  // move-only
  CaptureScope& operator=(const CaptureScope&) = delete;
  void ended() { m_ended = true; }

 private:
  void abandon() noexcept {
    const cudaStream_t stream = m_stream;
    // A forward that threw without invalidating the capture: capture_end() ends all of it.
    if (capturing(stream) && m_capture.graph) {
      try {
        m_capture.graph->capture_end();
      } catch (const std::exception&) {
      }
    }
    // What capture_end() left capturing (it threw before cudaStreamEndCapture).
    if (capturing(stream)) {
      cudaGraph_t graph = nullptr;
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    }
    // What capture_end() left routed. Where it got as far as ending the routing itself, the
    // allocator refuses a second end ("not currently recording to mempool_id"): nothing to do.
    const c10::DeviceIndex device = m_shared.device.index();
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device, m_shared.pool);
    } catch (const std::exception&) {
    }
#if GRAPHCHECK_HAS_HOST_ALLOCATOR_POOLS
    try {
      at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(m_shared.pool);
    } catch (const std::exception&) {
    }
#endif
    // The filters are gone: the graph (which they pointed to) and its outputs may go.
    m_capture.outputs.clear();
    m_capture.graph.reset();
    (void)cudaGetLastError();  // clear the capture's error for the next CUDA call
  }
  static bool capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus status{};
    return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
           status != cudaStreamCaptureStatusNone;
  }

  Capture& m_capture;
  const CudaShared& m_shared;
  cudaStream_t m_stream;
  bool m_ended = false;
};

class CudaBackend final : public GraphBackend {
 public:
  explicit CudaBackend(c10::DeviceIndex device) : m_meter(device) {
    m_shared.device = c10::Device(c10::kCUDA, device);
    m_shared.stream = c10::cuda::getStreamFromPool(false, device);
    m_shared.confirm_stream = c10::cuda::getStreamFromPool(false, device);
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
    m_shared.measure("gc/cuda/memory/allocated_bytes",
                     static_cast<double>(m_meter.allocated_bytes()), "bytes", "scenario", 0);
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
      const Uncounted uncounted(m_meter);  // Note [Uncounted forwards]
      const c10::cuda::CUDAStream side =
          c10::cuda::getStreamFromPool(false, m_shared.device.index());
      const c10::cuda::CUDAStreamGuard guard(side);
      WindowScope window(m_shared, "warm-up", batch_size);
      PendingTiming t{"warm-up", batch_size, std::make_unique<EventTimer>()};
      t.timer->start(side.stream());
      for (int i = 0; i < 2; ++i) (void)model.forward_all(inputs);
      t.timer->stop(side.stream());
      m_shared.timings.push_back(std::move(t));
      check_cuda(cudaStreamSynchronize(side.stream()), "cudaStreamSynchronize");
      window.close();
    }

    LivenessLog liveness;
    Capture first;
    {
      WindowScope window(m_shared, "capture", batch_size);
      first = capture_once(model, inputs, batch_size, m_liveness ? &liveness : nullptr, m_shared.stream);
      window.close();
    }
    // Note [Input liveness]: what the capture produced (in the graph's pool) is no input it
    // depends on; those intermediates are freed once the capture ends.
    std::erase_if(liveness.inputs, [&, pool = ranges(model, inputs)](const auto& in) {
      return pool.classify(in.first) == audit::RangeKind::pool;
    });

    std::vector<GraphRead> reads;
    if (m_audit && cuda_driver().missing.empty()) {
      // Note [Pointer audit]: a second capture rules out words that only look like pointers.
      std::vector<audit::AuditHit> kept;
      {
        const Uncounted uncounted(m_meter);  // Note [Uncounted forwards]
        // On a stream of its own: a graph's reset() frees the cuBLAS workspaces of the stream it
        // was captured on (recent libtorch, CUDAGraph.cpp), which `first` keeps reading.
        const Capture second = capture_once(model, inputs, batch_size, nullptr, m_shared.confirm_stream);
        kept = audit::confirm(first.audit, second.audit);
      }  // `second` is gone before `uncounted`: its outputs' memory is uncounted too
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
    return std::make_unique<CudaGraph>(m_shared, batch_size, std::move(first.pool_use), std::move(first.graph),
                                       std::move(inputs), std::move(first.outputs),
                                       std::move(reads), std::move(liveness));
  }

 private:
  Capture capture_once(LifecycleModel& model, const TensorList& inputs, std::int64_t batch_size,
                       LivenessLog* liveness, const c10::cuda::CUDAStream& stream) {
    Capture c;
#if GRAPHCHECK_HAS_CUDAGRAPH_KEEP_GRAPH
    c.graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/true);
#else
    c.graph = std::make_unique<at::cuda::CUDAGraph>();
#endif
    const c10::cuda::CUDAStreamGuard guard(stream);
    CaptureScope scope(c, m_shared, stream.stream());  // Note [Failed capture]: every way out below
    c.graph->capture_begin(m_shared.pool_for_capture());
    try {
      std::optional<LivenessTracker> tracker;
      if (liveness) tracker.emplace(*liveness);
      c.outputs = model.forward_all(inputs);
    } catch (const std::exception& e) {
      throw NotCapturable(fmt::format(
          "the forward failed during CUDA graph capture at batch size {}: {} (a host sync such as "
          "item() or .cpu(), a copy between host and device, or a synchronising allocation cannot "
          "be captured; keep values on the device)",
          batch_size, e.what()));
    }
    if (c.outputs.empty()) {
      throw NotCapturable("forward must return at least one tensor to be captured");
    }
    const auto end_capture = [&] {
      try {
        c.graph->capture_end();
        scope.ended();
        c.pool_use = PoolUse(m_shared.pool_graphs);
      } catch (const std::exception& e) {
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
      check_cuda(cuda_compat::capturing_graph(stream.stream(), &status, &g),
                 "cudaStreamGetCaptureInfo");
      if (status == cudaStreamCaptureStatusActive && g)
        c.audit = audit_cuda_graph(g, ranges(model, inputs));
    }
    end_capture();
#endif
    return c;
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
