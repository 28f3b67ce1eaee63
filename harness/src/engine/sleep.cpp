// The sleep emulation of a sleep cycle (PassRun::sleep_step, engine/pass_run.h): vLLM's sleep
// mode at level 1 or 2, discarding every storage of the model and of the graphs' reads and
// restoring what the level keeps at the wake.

#include <c10/core/Storage.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "counting_allocator.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "graphcheck/mutation.h"
#include "graphcheck/probe.h"
#include "poison.h"

namespace graphcheck::engine {

namespace {

// A storage's bytes as a uint8 tensor on its device.
torch::Tensor storage_bytes(const c10::Storage& storage) {
  torch::Tensor bytes = torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8).device(storage.device()));
  bytes.set_(storage, 0, {static_cast<std::int64_t>(storage.nbytes())}, {1});
  return bytes;
}

}  // namespace

// Sleep mode as vLLM's allocator does it: what the level keeps is copied to host memory, every
// storage of the model and of the graphs' reads is discarded (poison where it reads as NaN or as
// a byte payload, zeros elsewhere: indices must stay in range), and the wake copies the kept
// bytes back into the same storages. Level 2 keeps the registered buffers only (the engine's
// save, vLLM #16564); the weights come back by the reload that follows.
void PassRun::sleep_step(const CycleStep& step) {
  SleepEvent se;
  static_cast<PhaseEvent&>(se) = event(Phase::sleep);
  se.level = step.sleep_level;
  m_phase = Phase::sleep;
  begin(&Probe::on_sleep_begin, se);
  // Level 1 keeps whole storages (the allocator offloads allocations); level 2 keeps each
  // registered buffer's own elements (the engine clones named buffers), so a tensor that shares
  // a storage with a buffer is not restored with it.
  std::vector<std::pair<c10::Storage, torch::Tensor>> kept_storages;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> kept_buffers;
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;  // the host copies are the engine's, not the model's memory
    if (step.sleep_level == 1) {
      std::set<const c10::StorageImpl*> seen;
      for (const auto& t : live_tensors()) {
        if (!t.tensor.defined() || !t.tensor.has_storage()) continue;
        const c10::Storage& storage = t.tensor.storage();
        if (storage.nbytes() == 0 || !seen.insert(storage.unsafeGetStorageImpl()).second) continue;
        kept_storages.emplace_back(storage, storage_bytes(storage).to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
      }
    } else if (!mutation::enabled("driver.sleep_drops_buffers")) {
      for (const auto& item : m_model->catalog().registered_tensors()) {
        if (item.kind == TensorKind::parameter) continue;
        const torch::Tensor& b = item.tensor;
        if (b.defined() && b.numel() > 0) kept_buffers.emplace_back(b, b.to(torch::kCPU, false, /*copy=*/true));
      }
    }
    // Discard: every storage of the model and of the graphs' reads. A storage that any tensor or
    // read views as integers or bools gets zeros (indices must stay in range), the others the
    // poison of their dtype (NaN for floats, the sentinel byte for byte payloads).
    std::map<const c10::StorageImpl*, std::pair<c10::Storage, c10::ScalarType>> storages;
    std::set<const c10::StorageImpl*> integral;
    const auto note = [&](const c10::Storage& storage, c10::ScalarType dtype) {
      if (storage.nbytes() == 0) return;
      storages.emplace(storage.unsafeGetStorageImpl(), std::make_pair(storage, dtype));
      if (!c10::isFloatingType(dtype) && dtype != torch::kUInt8) integral.insert(storage.unsafeGetStorageImpl());
    };
    for (const auto& t : live_tensors()) {
      if (t.tensor.defined() && t.tensor.has_storage()) note(t.tensor.storage(), t.tensor.scalar_type());
    }
    for (const GraphView& graph : m_views) {
      for (const ResolvedRead& r : graph.reads) {
        if (r.read.held) note(r.read.held, r.read.dtype);
      }
    }
    for (const auto& [impl, item] : storages) {
      fill_storage(item.first, integral.count(impl) ? std::uint8_t{0} : poison_byte(item.second));
    }
    m_driver.backend().synchronize();
  }
  end(&Probe::on_sleep_end, se);

  SleepEvent we = se;
  we.phase = Phase::wake;
  m_phase = Phase::wake;
  begin(&Probe::on_wake_begin, we);
  {
    HarnessTime t(m_harness_seconds);
    UncountedScope uncounted;
    for (const auto& [storage, bytes] : kept_storages) storage_bytes(storage).copy_(bytes);
    for (const auto& [buffer, saved] : kept_buffers) buffer.copy_(saved);
    m_driver.backend().synchronize();
  }
  end(&Probe::on_wake_end, we);
  if (step.loads) refit_step(step);
}

}  // namespace graphcheck::engine
