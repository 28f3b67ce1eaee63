#include "backends/cupti_collector.h"

#include <cupti.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

namespace graphcheck {

struct CuptiCollector::State {
  CUpti_SubscriberHandle subscriber = nullptr;
  bool open = false;   // the backend's thread only
  CuptiWindow window;  // guarded by g_mutex
};

namespace {

// CUPTI's activity API reports through plain C callbacks without a user pointer: the one active
// collector is reached through g_active (CUPTI allows one subscriber per process anyway). The
// buffer-completed callback may run on a CUPTI worker thread, not the one that calls
// cuptiActivityFlushAll (cupti_activity.h, cuptiActivityRegisterCallbacks: buffers are "handled
// using asynchronous requested/completed callbacks"), so the pointer and the window behind it are
// read and written only under g_mutex. An atomic pointer alone would not do: a callback that has
// loaded it could still use the State while ~CuptiCollector destroys it. The backend's thread
// never holds g_mutex across a CUPTI call (cuptiActivityFlushAll delivers buffers to the callback,
// which takes it).
std::mutex g_mutex;
CuptiCollector::State* g_active = nullptr;  // guarded by g_mutex

std::string cupti_error(CUptiResult r) {
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  return text ? text : fmt::format("CUptiResult {}", static_cast<int>(r));
}

void check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS)
    throw std::runtime_error(fmt::format("CUPTI: {} failed: {}", what, cupti_error(r)));
}

constexpr std::size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
  *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

// The records CUPTI dropped since the last read. Since CUDA 6.0 all activity buffers are global
// (cupti_activity.h, CUpti_BuffersCallbackCompleteFunc: its context and streamId "will always be
// NULL"), and a NULL context gets "the dropped count from global queue", which is where every
// record lands; each read resets that count to zero.
std::size_t dropped_records() {
  std::size_t dropped = 0;
  return cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS ? dropped : 0;
}

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t, std::uint8_t* buffer, std::size_t,
                               std::size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (CuptiCollector::State* state = g_active) {
    CuptiWindow& w = state->window;
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          ++w.kernels;
          if (k->graphNodeId != 0) {
            ++w.graph_kernels;
            w.graph_nodes.insert(k->graphNodeId);
          }
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY:
          ++w.memcpys;
          break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
          ++w.memsets;
          break;
        case CUPTI_ACTIVITY_KIND_MEMORY2: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
          if (m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) {
            ++w.allocations;
            w.allocated_bytes += m->bytes;
          }
          break;
        }
        default:
          break;
      }
    }
    w.dropped += dropped_records();  // where cupti_activity.h says to: with each completed buffer
  }
  std::free(buffer);
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                         CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMORY2};

}  // namespace

std::unique_ptr<CuptiCollector> CuptiCollector::start() {
  std::unique_ptr<CuptiCollector> c(new CuptiCollector);
  c->m_state = std::make_unique<State>();
  const CUptiResult r = cuptiSubscribe(&c->m_state->subscriber, on_callback, nullptr);
  bool other_collector = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    other_collector = g_active != nullptr;
  }
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || other_collector) {
    if (r == CUPTI_SUCCESS) cuptiUnsubscribe(c->m_state->subscriber);
    throw CuptiBusy(
        "CUPTI is already in use by another subscriber in this process (a profiler such as "
        "Nsight Systems or Nsight Compute, or another CUPTI tool): run graphcheck outside the "
        "profiler, or set GRAPHCHECK_CUPTI=0 to run the cuda backend without the CUPTI collector");
  }
  check(r, "cuptiSubscribe");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
        "cuptiActivityRegisterCallbacks");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_active = c->m_state.get();
  }
  return c;
}

CuptiCollector::~CuptiCollector() {
  if (!m_state) return;
  if (m_state->open) {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    // After this no callback reaches the State that m_state's destructor frees.
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_active == m_state.get()) g_active = nullptr;
  }
  cuptiUnsubscribe(m_state->subscriber);
}

void CuptiCollector::begin_window(std::string name) {
  (void)dropped_records();  // resets the count: drops before the window are not its own
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    m_state->window = CuptiWindow{};
    m_state->window.name = std::move(name);
  }
  for (CUpti_ActivityKind k : kKinds) check(cuptiActivityEnable(k), "cuptiActivityEnable");
  m_state->open = true;
}

CuptiWindow CuptiCollector::end_window() {
  // Blocking, but it "doesn't issue any CUDA synchronization calls" (cupti_activity.h,
  // cuptiActivityFlushAll): the caller has synchronised the window's work (header contract).
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  m_state->open = false;
  // Records dropped for want of a buffer (buffer_requested found no memory) may leave no
  // completed buffer to read the count with.
  const std::size_t dropped = dropped_records();
  std::lock_guard<std::mutex> lock(g_mutex);
  m_state->window.dropped += dropped;
  return std::move(m_state->window);
}

}  // namespace graphcheck
