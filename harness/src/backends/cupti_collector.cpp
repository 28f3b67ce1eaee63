#include "backends/cupti_collector.h"

#include <cupti.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

namespace graphcheck {

// CUPTI's activity API reports through plain C callbacks without a user pointer: the one active
// collector is reached through this pointer (CUPTI allows one subscriber per process anyway).
struct CuptiCollector::State {
  CUpti_SubscriberHandle subscriber = nullptr;
  std::mutex mutex;
  bool open = false;
  CuptiWindow window;
};

namespace {

CuptiCollector::State* g_active = nullptr;

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

void CUPTIAPI buffer_completed(CUcontext, std::uint32_t stream_id, std::uint8_t* buffer,
                               std::size_t, std::size_t valid) {
  CuptiCollector::State* state = g_active;
  if (state) {
    std::lock_guard<std::mutex> lock(state->mutex);
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
    std::size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, stream_id, &dropped) == CUPTI_SUCCESS)
      w.dropped += dropped;
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
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED || g_active != nullptr) {
    if (r == CUPTI_SUCCESS) cuptiUnsubscribe(c->m_state->subscriber);
    throw CuptiBusy(
        "CUPTI is already in use by another subscriber in this process (a profiler such as "
        "Nsight Systems or Nsight Compute, or another CUPTI tool): run graphcheck outside the "
        "profiler, or set GRAPHCHECK_CUPTI=0 to run the cuda backend without the CUPTI collector");
  }
  check(r, "cuptiSubscribe");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
        "cuptiActivityRegisterCallbacks");
  g_active = c->m_state.get();
  return c;
}

CuptiCollector::~CuptiCollector() {
  if (!m_state) return;
  if (m_state->open) {
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  }
  cuptiActivityFlushAll(1);
  if (g_active == m_state.get()) g_active = nullptr;
  cuptiUnsubscribe(m_state->subscriber);
}

void CuptiCollector::begin_window(std::string name) {
  {
    std::lock_guard<std::mutex> lock(m_state->mutex);
    m_state->window = CuptiWindow{};
    m_state->window.name = std::move(name);
  }
  for (CUpti_ActivityKind k : kKinds) check(cuptiActivityEnable(k), "cuptiActivityEnable");
  m_state->open = true;
}

CuptiWindow CuptiCollector::end_window() {
  check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
  m_state->open = false;
  std::lock_guard<std::mutex> lock(m_state->mutex);
  return std::move(m_state->window);
}

}  // namespace graphcheck
