// The census and poison passes' fills, and the idempotence pass's snapshots.

#include <fmt/format.h>
#include <torch/types.h>

#include <set>

#include "address_index.h"
#include "counting_allocator.h"
#include "fingerprint.h"
#include "glob.h"
#include "graphcheck/checkpoint.h"
#include "passes/passes.h"
#include "poison.h"
#include "tensor_format.h"

namespace graphcheck::passes {

std::map<std::string, TensorState> snapshot(const std::vector<NamedTensor>& tensors) {
  std::map<std::string, TensorState> out;
  for (const auto& t : tensors) {
    if (!t.tensor.defined()) continue;
    out[t.name] = {t.tensor.has_storage() ? t.tensor.data_ptr() : nullptr, t.tensor.sizes().vec(),
                   fingerprint(t.tensor)};
  }
  return out;
}

void fill_census(const LoadEvent& load, std::vector<CheckpointEntry> layout, CensusFillEvent& out) {
  const std::set<std::string> expected(load.expected.begin(), load.expected.end());
  for (auto& entry : layout) {
    if (load.format == LoadFormat::checkpoint && !expected.count(entry.checkpoint)) continue;
    const torch::Tensor& t = entry.region;
    if (!t.defined() || t.numel() == 0 || t.scalar_type() == torch::kBool || !t.has_storage()) continue;
    fill_poison(t);
    out.bytes += static_cast<std::int64_t>(t.nbytes());
    // The memory poisoned, not the tensor object: a PWAL that frees or rebinds the parameter
    // (set_data) must not change what is checked.
    entry.region = entry.region.detach();
    out.poisoned.push_back(std::move(entry));
  }
}

void poison_before_refit(std::vector<CheckpointEntry> layout, const std::vector<std::string>& prefixes,
                         PoisonFillEvent& out) {
  UncountedScope uncounted;
  out.kind = PoisonFillEvent::Kind::before_refit;
  for (auto& entry : layout) {
    if (!prefixes.empty() && !matches_any_prefix(entry.checkpoint, prefixes)) continue;
    const torch::Tensor& t = entry.region;
    if (!t.defined() || t.numel() == 0 || t.scalar_type() == torch::kBool) continue;
    fill_poison(t);
    out.names.push_back(entry.checkpoint);
    ++out.tensors;
    out.bytes += static_cast<std::int64_t>(t.nbytes());
  }
}

void poison_staged(std::vector<CheckpointEntry> layout, const std::vector<std::string>& patterns,
                   const std::vector<std::string>& prefixes, PoisonFillEvent& out) {
  UncountedScope uncounted;
  out.kind = PoisonFillEvent::Kind::staged;
  std::set<std::string> used;
  for (auto& entry : layout) {
    bool match = false;
    for (const auto& pattern : patterns) {
      if (path_matches(pattern, entry.checkpoint) || path_matches(pattern, entry.live)) {
        used.insert(pattern);
        match = true;
      }
    }
    // Only what this refit streams: staging tensors of layers a partial refit leaves out may be
    // aliases of live storage.
    if (!prefixes.empty() && !matches_any_prefix(entry.checkpoint, prefixes)) continue;
    const torch::Tensor& t = entry.region;
    if (!match || !t.defined() || t.scalar_type() == torch::kBool) continue;
    fill_poison(t);
    out.bytes += static_cast<std::int64_t>(t.nbytes());
    out.staged.emplace(entry.checkpoint, t);
  }
  out.tensors = static_cast<std::int64_t>(out.staged.size());
  for (const auto& pattern : patterns) {
    if (!used.count(pattern)) out.unused_patterns.push_back(pattern);
  }
}

namespace {
// Integer and bool storages may hold indices or masks: 0xFF there would turn a stale replay into
// out-of-bounds reads instead of NaN. uint8 holds quantized payloads and UE8M0 scales.
bool poisonable(c10::ScalarType dtype) { return c10::isFloatingType(dtype) || dtype == torch::kUInt8; }
}  // namespace

void poison_orphans(const std::vector<GraphView>& graphs, std::vector<NamedTensor> live_tensors,
                    PoisonFillEvent& out) {
  UncountedScope uncounted;
  out.kind = PoisonFillEvent::Kind::orphans;
  // Only storages the backend keeps alive (GraphRead::held): poisoning by address what a CUDA
  // graph reads would write into freed allocator blocks.
  const AddressIndex live(std::move(live_tensors));
  std::set<const c10::StorageImpl*> done;
  // A storage also read as integers or bools (a packed buffer) is left alone as a whole.
  for (const GraphView& graph : graphs) {
    for (const ResolvedRead& r : graph.reads) {
      if (r.read.held && !poisonable(r.read.dtype)) done.insert(r.read.held.unsafeGetStorageImpl());
    }
  }
  for (const GraphView& graph : graphs) {
    for (const ResolvedRead& r : graph.reads) {
      const c10::StorageImpl* impl = r.read.held ? r.read.held.unsafeGetStorageImpl() : nullptr;
      // Named at capture (an unnamed read is the address probe's finding), and a dtype whose
      // poison reads as garbage rather than as an index: float (NaN) or byte payloads.
      if (!impl || r.name.empty() || !poisonable(r.read.dtype) || done.count(impl)) continue;
      if (live.resolve(r.read.address, r.read.bytes)) continue;  // still live
      done.insert(impl);
      fill_storage(r.read.held, poison_byte(r.read.dtype));
      out.bytes += static_cast<std::int64_t>(r.read.held.nbytes());
      out.orphans.push_back(fmt::format("'{}', {} {} at {}", r.name, c10::toString(r.read.dtype),
                                        shape_string(r.read.sizes), address_string(r.read.address)));
    }
  }
  out.tensors = static_cast<std::int64_t>(out.orphans.size());
}

bool holds_nan(const TensorList& outputs) {
  UncountedScope uncounted;
  for (const torch::Tensor& out : outputs) {
    if (!out.defined() || !c10::isFloatingType(out.scalar_type()) || out.numel() == 0) continue;
    if (out.isnan().any().item<bool>()) return true;
  }
  return false;
}

}  // namespace graphcheck::passes
