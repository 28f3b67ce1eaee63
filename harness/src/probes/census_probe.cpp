// census: the write census, an oracle independent of the model's loader (DESIGN §2.2). Model B is
// the same code as A, so a loader bug that is the same in every load (a narrow() off by one that
// never writes a shard's last row) gives replay(A) = eager(A) = eager(B). The census sees it: in a
// pass of its own, right before every load (the initial checkpoint or dummy load, each refit,
// each bucket; after stage_for_refit()), the driver poisons every element that load is expected
// to write (passes/fills.cpp, CensusFillEvent): the region of each checkpoint tensor the load streams (checkpoint_layout(): a shard
// of a fused live tensor is just its rows), or every tensor of the layout for a dummy load. After
// the load, the elements still holding the poison are noted; after the load's PWAL (or when the
// next step begins, if none runs) those that still hold it are a finding naming the tensor, the
// count, the first element and the load.
//
// A name the loader rebinds to a new tensor instead of writing the poisoned memory is left out
// (gc/census/rebound_by_loader): nothing reads that memory any more, and after a capture the
// address probe judges the rebinding. A live tensor larger than its checkpoint tensor (a padded
// vocabulary) declares the checkpoint's part as a shard of itself in checkpoint_mapping(), so
// that only that part is expected to be written.
//
// Survivors: the poison is NaN in every float dtype (poison.h). Dtypes without NaN hold a sentinel
// byte that a legitimate value can equal, so an element counts only where the expected value
// (the streamed tensor, or a declared dummy_weight_value) differs from it; without an expected
// value, only a tensor that kept the sentinel everywhere counts. After PWAL an element still
// counts when it is NaN (post-processing may move the poison, not clear it) or, for dtypes
// without NaN, still holds the sentinel; a PWAL that writes it (a model that defers its writes
// to PWAL) clears it.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <optional>
#include <set>

#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "poison.h"
#include "tensor_format.h"

namespace graphcheck {
namespace {

struct Poisoned {
  CheckpointEntry entry;
  std::string load;         // "the initial checkpoint load", "bucket 'qk' of refit cycle 3"
  std::optional<double> dummy_value;
  bool scanned = false;     // after the load
  std::int64_t count = 0;   // elements the load left poisoned
  torch::Tensor survivors;  // bool mask over the region's elements, only where count > 0
};

class CensusProbe final : public EmptyProbe {
 public:
  [[nodiscard]] std::string name() const override { return "census"; }

  // The driver poisoned what the load should write (passes/fills.cpp), right before the load.
  void on_census_filled(RunContext& ctx, const CensusFillEvent& fill) override {
    if (ctx.pass() != Pass::census || !fill.load) return;
    const LoadEvent& e = *fill.load;
    const std::string load = describe(e);
    std::map<std::string, std::optional<double>> dummy_values;
    if (e.format == LoadFormat::dummy) {
      // The region's live tensor carries the attributes.
      for (const auto& live : ctx.checkpoint_tensors()) {
        const TensorAttrs* a = ctx.tensor_attrs(live.tensor);
        dummy_values[live.name] = a ? a->dummy_weight_value : std::nullopt;
      }
    }
    for (const CheckpointEntry& entry : fill.poisoned) {
      Poisoned p;
      p.load = load;
      if (auto it = dummy_values.find(entry.live); it != dummy_values.end()) p.dummy_value = it->second;
      p.entry = entry;  // its region is the memory poisoned, detached from the tensor object
      m_pending.push_back(std::move(p));
    }
    ctx.measure(e, "gc/census/poisoned_tensors", static_cast<double>(fill.poisoned.size()), "tensors");
    ctx.measure(e, "gc/census/poisoned_bytes", static_cast<double>(fill.bytes), "bytes");
  }

  void on_load_end(RunContext& ctx, const LoadEvent& e) override {
    if (ctx.pass() != Pass::census) return;
    std::map<std::string, const torch::Tensor*> streamed;
    for (const auto& item : e.streamed) streamed[item.name] = &item.tensor;
    std::map<std::string, torch::Tensor> now;
    for (auto& entry : ctx.checkpoint_layout()) now.emplace(entry.checkpoint, entry.region);
    std::int64_t rebound = 0;
    for (Poisoned& p : m_pending) {
      if (p.scanned || p.load != describe(e)) continue;
      p.scanned = true;
      const torch::Tensor& t = p.entry.region;
      // A loader that rebinds the name to the loaded tensor (set_data, or a new parameter)
      // wrote nothing into the poisoned memory, and needs not: nothing reads it any more. Before
      // a capture that is legitimate; after one, the address probe judges it.
      auto current = now.find(p.entry.checkpoint);
      if (current == now.end() || !current->second.defined() || !current->second.has_storage() ||
          current->second.data_ptr() != t.data_ptr()) {
        p.count = 0;
        ++rebound;
        continue;
      }
      torch::Tensor expected;
      auto it = streamed.find(p.entry.checkpoint);
      if (it != streamed.end()) {
        expected = *it->second;
      } else if (p.dummy_value) {
        expected = torch::full(t.sizes(), *p.dummy_value, t.options());
      }
      // Note [Census memory]: a count first, and a mask only for a tensor the load left
      // poisoned. Masks for every tensor (a byte per element, held until PWAL ends) cost a
      // quarter to a half of the model's bytes on a clean run. The expected value is the
      // streamed record, a view of the checkpoint's map: its pages leave the resident set once
      // read, so that the scan never holds the whole checkpoint's (safetensors.h, Note [Released
      // pages]; a no-op for a record that is not a map's).
      p.count = count_survivors(t, expected).count;
      if (p.count > 0) p.survivors = survivor_mask(t, expected);
      if (expected.defined() && expected.device().is_cpu() && expected.is_contiguous() && expected.nbytes() > 0) {
        (void)safetensors::release_mapped_pages(expected.data_ptr(), expected.nbytes());
      }
    }
    if (rebound > 0) ctx.measure(e, "gc/census/rebound_by_loader", static_cast<double>(rebound), "tensors");
  }

  // After the load's PWAL, or when the next step begins if no PWAL ran.
  void on_pwal_end(RunContext& ctx, const PhaseEvent& e) override {
    // A chunked reload runs PWAL after every bucket; a loader may defer a write to a later chunk
    // (a fused pair split across chunks), so the census settles at the end of the refit.
    if (const CycleStep* step = ctx.cycle_step(e.cycle); step && step->pwal_per_bucket) return;
    settle(ctx, e);
  }
  void on_refit_begin(RunContext& ctx, const PhaseEvent& e) override { settle(ctx, e); }
  void on_refit_end(RunContext& ctx, const PhaseEvent& e) override { settle(ctx, e); }
  void on_warmup_begin(RunContext& ctx, const PhaseEvent& e) override { settle(ctx, e); }
  void on_scenario_end(RunContext& ctx) override {
    PhaseEvent e;
    e.phase = Phase::refit;
    settle(ctx, e);
  }

 private:
  static std::string describe(const LoadEvent& e) {
    if (!e.refit) return fmt::format("the initial {} load", to_string(e.format));
    if (!e.bucket.empty()) return fmt::format("bucket '{}' of refit cycle {}", e.bucket, e.cycle);
    return fmt::format("the load of refit cycle {}", e.cycle);
  }

  void settle(RunContext& ctx, const PhaseEvent& e) {
    if (ctx.pass() != Pass::census || m_pending.empty()) return;
    std::vector<Poisoned> pending = std::move(m_pending);
    m_pending.clear();
    std::int64_t findings = 0;
    for (Poisoned& p : pending) {
      if (!p.scanned || p.count == 0) continue;
      const torch::Tensor& t = p.entry.region;
      // Still poison after PWAL: NaN in a float dtype, else the sentinel byte.
      torch::Tensor still = poison_is_nan(t.scalar_type())
                                ? t.isnan().reshape({t.numel()})
                                : pattern_mask(t);
      torch::Tensor mask = p.survivors.logical_and(still);
      const std::int64_t count = mask.sum().item<std::int64_t>();
      if (count == 0) continue;
      const std::int64_t first = mask.nonzero()[0][0].item<std::int64_t>();
      ++findings;
      const std::vector<std::int64_t> index = unravel(first, t.sizes());
      ctx.fail(name(), e, p.entry.live,
               fmt::format("{} still holds the poison the census wrote before {} in {} of {} "
                           "elements (first at element {}, index [{}]) after the load and its "
                           "PWAL: the load never wrote them (a loader that skips part of the "
                           "tensor, a weight_loader bound to another tensor, or a shard the "
                           "stream delivered and the model dropped)",
                           p.entry.describe(), p.load, count, t.numel(), first,
                           fmt::join(index, ", ")),
               {{"tensor", p.entry.live},
                {"checkpoint_name", p.entry.checkpoint},
                {"load", p.load},
                {"surviving_elements", std::to_string(count)},
                {"elements", std::to_string(t.numel())},
                {"first_element", std::to_string(first)},
                {"first_index", fmt::format("[{}]", fmt::join(index, ", "))},
                {"dtype", c10::toString(t.scalar_type())},
                {"shape", shape_string(t.sizes())},
                {"poison", fmt::format("0x{:02X}", poison_byte(t.scalar_type()))}});
    }
    ctx.measure(e, "gc/census/findings", static_cast<double>(findings), "tensors");
  }

  static std::vector<std::int64_t> unravel(std::int64_t flat, c10::IntArrayRef sizes) {
    std::vector<std::int64_t> index(sizes.size());
    for (std::size_t d = sizes.size(); d-- > 0;) {
      index[d] = sizes[d] > 0 ? flat % sizes[d] : 0;
      flat = sizes[d] > 0 ? flat / sizes[d] : 0;
    }
    return index;
  }

  std::vector<Poisoned> m_pending;
};

}  // namespace

GRAPHCHECK_REGISTER_PROBE_IN("census",
                             "the write census: every element a load should write is poisoned "
                             "before it and must be overwritten (independent of the model's "
                             "loader)",
                             CensusProbe, ::graphcheck::Pass::census);

}  // namespace graphcheck
