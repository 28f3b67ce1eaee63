// The stream-order pass (engine/pass_run.h): one load and its PWAL, repeated on fresh models with
// the same weights streamed in other orders, against the canonical order (the checkpoint's).
//
// Note [Stream order]
// Real loaders get tensors in no fixed order: a checkpoint in several files, a dict sorted by
// name, RL weight sync in named_parameters() order, buckets sent as they fill. A loader that
// combines tensors as they arrive (a weight with whatever scale is live at that moment) is right
// in one order only. So the pass loads the same weights reversed, shuffled (seeded), by name, and
// in contiguous buckets sent last first (a sharded checkpoint's files), and, for a scenario that
// refits, in its own order and reversed cut into load_weights() calls (a sync's buckets), and
// compares every live tensor after PWAL with the canonical load's. Each model starts from the same
// global RNG seed, so that randomness a model draws in its hooks is not taken for order. The
// pass holds one model at a time while the orders agree: the canonical model leaves only the
// fingerprints of its live tensors, and is built again beside a variant only when that variant's
// fingerprints differ, to say which elements differ and by how much.

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "fingerprint.h"
#include "engine/driver.h"
#include "engine/errors.h"
#include "engine/pass_run.h"
#include "engine/streams.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/model.h"
#include "graphcheck/probe.h"
#include "graphcheck/safetensors.h"
#include "poison.h"
#include "support/release_memory.h"
#include "tensor_format.h"

namespace graphcheck::engine {

namespace {

std::string module_prefix_of(const std::string& name) {
  const auto dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot + 1);
}

// An order of the canonical stream, named, and how it is cut into load_weights() calls: the index
// in `order` where each call after the first begins (none: one call).
struct StreamOrder {
  std::string name;
  std::vector<std::size_t> order;
  std::vector<std::size_t> calls;
};

// The other orders of `canonical` (Note [Stream order]), each named; orders equal to the canonical
// one or to an earlier one are left out. With `calls` (a scenario that refits, as RL weight sync
// does), the last two are the checkpoint's order and the reversed one, each cut into
// load_weights() calls as a sync sends its buckets (one tensor a call up to kMaxCalls tensors,
// else kMaxCalls calls): a loader that derives a tensor from what one call brings (the norm it
// sees when the head arrives) depends on which call brings what, in one direction or the other.
std::vector<StreamOrder> stream_order_variants(const std::vector<NamedTensor>& canonical, std::uint64_t seed,
                                               bool cut_into_calls) {
  const std::size_t n = canonical.size();
  std::vector<StreamOrder> out;
  std::vector<std::size_t> identity(n);
  for (std::size_t i = 0; i < n; ++i) identity[i] = i;
  const auto add = [&](std::string name, std::vector<std::size_t> order, std::vector<std::size_t> calls = {}) {
    if (order == identity && calls.empty()) return;
    for (const auto& o : out) {
      if (o.order == order && o.calls == calls) return;
    }
    out.push_back({std::move(name), std::move(order), std::move(calls)});
  };
  add("reversed", std::vector<std::size_t>(identity.rbegin(), identity.rend()));
  {
    std::vector<std::size_t> shuffled = identity;
    std::mt19937_64 rng(seed);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    add(fmt::format("shuffled (seed {})", seed), std::move(shuffled));
  }
  {
    std::vector<std::size_t> by_name = identity;
    std::stable_sort(by_name.begin(), by_name.end(),
                     [&](std::size_t a, std::size_t b) { return canonical[a].name < canonical[b].name; });
    add("sorted by name", std::move(by_name));
  }
  if (n >= 3) {
    const std::size_t buckets = std::min<std::size_t>(4, n);
    std::vector<std::size_t> grouped;
    for (std::size_t k = buckets; k-- > 0;) {
      for (std::size_t i = k * n / buckets; i < (k + 1) * n / buckets; ++i) grouped.push_back(i);
    }
    add(fmt::format("in {} contiguous buckets, the last first", buckets), std::move(grouped));
  }
  if (cut_into_calls && n >= 2) {
    constexpr std::size_t kMaxCalls = 16;
    const std::size_t count = std::min(n, kMaxCalls);
    std::vector<std::size_t> calls;
    for (std::size_t c = 1; c < count; ++c) calls.push_back(c * n / count);
    const std::string cut = count == n ? std::string("one load_weights() call per tensor")
                                       : fmt::format("in {} load_weights() calls", count);
    add(fmt::format("in the checkpoint's order, {}", cut), identity, calls);
    add(fmt::format("reversed, {}", cut), std::vector<std::size_t>(identity.rbegin(), identity.rend()), calls);
  }
  return out;
}

// Note [Fresh memory alike in every build]: what a model never writes holds whatever its memory
// held before: a KV cache or a workspace made with torch.empty, rows of a fused parameter no
// shard fills. Each build of the pass gets other leftovers, so such bytes differ from one build to
// the next whatever the order, and were reported as an order the load depends on, a false finding
// on a clean model (a torch.empty KV cache) and the wrong cause for a load that never writes some
// rows (the census's finding). While the pass builds, loads and runs PWAL, torch fills every
// tensor it makes uninitialised (torch.empty and its kin, resize_'s new elements) with the same
// value: NaN, or an integer type's largest value. That is torch's own mode for it
// (use_deterministic_algorithms with fill_uninitialized_memory), on every device; it warns only
// where an op has no deterministic implementation (its warnings, which would read as if the user
// had asked for that mode, are dropped in C++ code), and every build of the pass runs in it.
class FreshMemoryAlike {
 public:
  FreshMemoryAlike()
      : m_quiet(&m_filter),
        m_deterministic(at::globalContext().deterministicAlgorithms()),
        m_warn_only(at::globalContext().deterministicAlgorithmsWarnOnly()),
        m_fill(at::globalContext().deterministicFillUninitializedMemory()) {
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/m_deterministic ? m_warn_only : true);
    at::globalContext().setDeterministicFillUninitializedMemory(true);
  }
  ~FreshMemoryAlike() {
    at::globalContext().setDeterministicAlgorithms(m_deterministic, m_warn_only);
    at::globalContext().setDeterministicFillUninitializedMemory(m_fill);
  }
  FreshMemoryAlike(const FreshMemoryAlike&) = delete;
  FreshMemoryAlike& operator=(const FreshMemoryAlike&) = delete;

 private:
  // Drops the mode's own alerts ("... does not have a deterministic implementation", cuBLAS's
  // workspace config); every other warning goes where it went.
  class AlertFilter final : public c10::WarningHandler {
   public:
    AlertFilter() : m_next(c10::WarningUtils::get_warning_handler()) {}
    void process(const c10::Warning& warning) override {
      if (warning.msg().find("deterministic") != std::string::npos) return;
      m_next->process(warning);
    }

   private:
    c10::WarningHandler* m_next;
  };
  AlertFilter m_filter;
  c10::WarningUtils::WarningHandlerGuard m_quiet;
  bool m_deterministic, m_warn_only, m_fill;
};

// Note [Views streamed where nothing keeps them]: an alias of each view of the map (a handle of
// its own, so that an in-place change of a tensor's shape or strides stays with this load); a
// clone of any other tensor. The pages wholly inside a view the loader has let go leave the
// resident set as the next one is asked for, as CloningStream's sources do: a model never holds
// the map's pages beside its own (dsv4 32x1024's BM_PeakRss read 3.06x its bytes without this,
// 2.17x with it). Pages a view shares with a neighbour, and views still held, wait for the pass's
// release after the load.
class AliasingStream final : public WeightStream {
 public:
  explicit AliasingStream(WeightStream& inner) : m_inner(inner) {}
  std::optional<NamedTensor> next() override {
    release_last();
    std::optional<NamedTensor> item = m_inner.next();
    if (item && item->tensor.defined()) {
      const torch::Tensor& t = item->tensor;
      if (!t.has_storage() || t.nbytes() == 0 || !safetensors::lies_in_map(t.data_ptr(), t.nbytes())) {
        // Not the map's (a tensor the file does not align, copied by the stream): what the loader
        // writes into it no release would drop, so it gets a clone, as before.
        item->tensor = t.clone();
        return item;
      }
      item->tensor = t.alias();
      m_last = item->tensor;
      m_last_refs = m_last.storage().use_count();
    }
    return item;
  }
  [[nodiscard]] std::string source() const override { return m_inner.source(); }

 private:
  void release_last() {
    if (!m_last.defined()) return;
    const bool let_go = m_last.use_count() == 1 && m_last.has_storage() && m_last.storage().use_count() == m_last_refs;
    if (let_go && m_last.device().is_cpu() && m_last.is_contiguous() && m_last.nbytes() > 0) {
      (void)safetensors::release_mapped_pages(m_last.data_ptr(), m_last.nbytes());
    }
    m_last = torch::Tensor();
  }
  WeightStream& m_inner;
  torch::Tensor m_last;  // the alias last handed out
  std::size_t m_last_refs = 0;
};

// Live tensors of `variant` that differ from `canonical`'s, by name.
std::vector<StreamOrderDelta> compare_live_after_orders(LifecycleModel& canonical, LifecycleModel& variant,
                                           const std::vector<std::string>& streamed) {
  std::map<std::string, torch::Tensor> theirs;
  for (auto& t : live_tensors(variant)) theirs.emplace(t.name, t.tensor);
  std::vector<StreamOrderDelta> out;
  std::set<std::string> seen;
  for (const auto& mine : live_tensors(canonical)) {
    if (!seen.insert(mine.name).second) continue;
    auto it = theirs.find(mine.name);
    const torch::Tensor& a = mine.tensor;
    StreamOrderDelta d;
    d.tensor = mine.name;
    if (it == theirs.end() || !it->second.defined() || !a.defined()) {
      if (it == theirs.end() || a.defined() != it->second.defined()) {
        d.detail = it == theirs.end() ? "absent after this order" : "defined after one order only";
      }
    } else {
      const torch::Tensor& b = it->second;
      if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type()) {
        d.detail = fmt::format("{} {} after the canonical order, {} {} after this one", c10::toString(a.scalar_type()),
                               shape_string(a.sizes()), c10::toString(b.scalar_type()), shape_string(b.sizes()));
      } else if (a.numel() > 0 && a.layout() == c10::kStrided && !a.is_meta()) {
        const torch::Tensor differ_mask = element_bytes(a).ne(element_bytes(b.to(a.device()))).any(1);
        const std::int64_t differ = differ_mask.sum().item<std::int64_t>();
        if (differ > 0) {
          std::string magnitude;
          if (c10::isFloatingType(a.scalar_type())) {
            const double max_abs = (a.to(torch::kFloat64) - b.to(a.device()).to(torch::kFloat64))
                                       .abs()
                                       .nan_to_num(INFINITY)
                                       .max()
                                       .item<double>();
            magnitude = fmt::format(", max abs {:.6g}", max_abs);
          }
          d.detail = fmt::format("{} of {} elements differ{}", differ, a.numel(), magnitude);
        }
      }
    }
    if (d.detail.empty()) continue;
    const std::string module = module_prefix_of(mine.name);
    for (const auto& name : streamed) {
      if (!module.empty() && name.rfind(module, 0) == 0) d.streamed_near.push_back(name);
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

void PassRun::stream_order() {
  const Scenario& s = scenario();
  StreamOrderEvent event;
  event.phase = Phase::load;
  // Which load: the initial one when it reads a checkpoint, else the first plain refit.
  const RefitSpec* refit = nullptr;
  std::string path;
  std::vector<std::string> only;
  if (s.load == LoadFormat::checkpoint) {
    path = s.checkpoint.empty() ? m_driver.checkpoint_for(m_driver.seed(), *this,
                                                          [&] { return construct_synthesis(); })
                                : s.checkpoint;
    event.load = "the initial load";
  } else {
    for (const RefitSpec& spec : s.cycles) {
      if (spec.kind == CycleKind::refit && !spec.sweep && spec.buckets.empty()) {
        refit = &spec;
        break;
      }
    }
    if (!refit) {
      // A dummy load streams nothing, and no refit streams in one piece: no order to vary.
      measure(PhaseEvent{}, "gc/stream_order/orders", 0, "orders");
      return;
    }
    const std::uint64_t seed = refit->seed + (m_driver.seed() - s.seed);
    path = m_driver.checkpoint_for(seed, *this, [&] { return construct_synthesis(); });
    only = refit->prefixes();
    event.load = "refit cycle 1";
    event.cycle = 1;
  }
  // Views of the file's map, not copies (each model is streamed clones of them): the pass holds
  // its two models and the page cache, and the views' pages leave the resident set after each
  // build (Note [Released pages]).
  std::vector<NamedTensor> weights;
  const auto open_weights = [&] {
    HarnessTime t(m_harness_seconds);
    weights.clear();
    try {
      SafetensorsWeightStream file(path, only, {}, StreamReads::mapped);
      while (auto item = file.next()) weights.push_back(std::move(*item));
    } catch (const safetensors::Error& e) {
      throw UserError(e.what());
    }
  };
  open_weights();
  // The map's bytes the weights lie in, from the first to the end of the last (views only).
  const auto mapped_range = [&]() -> std::pair<const std::byte*, std::size_t> {
    std::uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const auto& w : weights) {
      if (!w.tensor.defined() || !w.tensor.is_contiguous() || w.tensor.nbytes() == 0) continue;
      if (!safetensors::lies_in_map(w.tensor.data_ptr(), w.tensor.nbytes())) continue;
      const auto data = reinterpret_cast<std::uintptr_t>(w.tensor.data_ptr());
      lo = std::min(lo, data);
      hi = std::max(hi, data + w.tensor.nbytes());
    }
    if (hi <= lo) return {nullptr, 0};
    return {reinterpret_cast<const std::byte*>(lo), hi - lo};
  };
  // Every page of the map a weight lies on, those a weight shares with its neighbour included:
  // what a loader wrote into the views (a copied page) goes with them, and the next build streams
  // the file's bytes (Note [Views streamed where nothing keeps them]).
  // Neighbours in one call.
  const auto release_pages = [&] {
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    std::uintptr_t run_begin = 0, run_end = 0;
    const auto flush = [&] {
      if (run_end > run_begin) {
        (void)safetensors::release_mapped_pages(reinterpret_cast<const void*>(run_begin), run_end - run_begin);
      }
    };
    for (const auto& w : weights) {
      if (!w.tensor.defined() || !w.tensor.is_contiguous() || w.tensor.nbytes() == 0) continue;
      const auto data = reinterpret_cast<std::uintptr_t>(w.tensor.data_ptr());
      const std::uintptr_t begin = data / page * page, end = (data + w.tensor.nbytes() + page - 1) / page * page;
      if (begin > run_end || end < run_begin) {
        flush();
        run_begin = begin;
        run_end = end;
      } else {
        run_begin = std::min(run_begin, begin);
        run_end = std::max(run_end, end);
      }
    }
    flush();
  };
  event.source = fmt::format("checkpoint '{}'", path);
  for (const auto& w : weights) event.canonical.push_back(w.name);
  const bool refits = std::any_of(s.cycles.begin(), s.cycles.end(),
                                  [](const RefitSpec& spec) { return spec.kind == CycleKind::refit; });
  const auto variants = stream_order_variants(weights, m_driver.seed(), /*cut_into_calls=*/refits);
  if (variants.empty()) {
    measure(PhaseEvent{}, "gc/stream_order/orders", 0, "orders");
    return;
  }

  UncountedScope uncounted;  // the pass's own models, no memory check here
  FlagScope quiet(m_quiet);
  // Note [Views streamed where nothing keeps them]: each model was streamed clones of the map's
  // views, so that a loader that keeps what it is streamed (a parameter rebound onto it, a view of
  // it in a dict) shares no memory with the next model. Under Note [Fresh memory alike in every
  // build] a clone is torch's fill of fresh memory and then the copy: two writes of the checkpoint
  // per model, a third of the pass's time on the 10,000-tensor scale model (issue 26). So the
  // models are streamed aliases of the views themselves while no loader has kept one: after each
  // load, a view whose storage gained a tensor is one kept, and from then on (that model built
  // again too) every model is streamed clones. What a loader wrote into a view it did not keep is
  // a copied page of the private map, which release_pages() drops after the load; the page table
  // then says that it did (Note [Written pages of a map]). Where it cannot tell (pagemap hidden),
  // every model gets clones; where a page stayed written (a locked map), the file is mapped
  // afresh and every later model gets clones of that. Tensors the file does not align (copies,
  // not the map's) are cloned as they stream (AliasingStream). One difference stays: a view's
  // storage cannot be resized, where a clone's can.
  bool clone_streamed = [&] {
    const auto [data, bytes] = mapped_range();
    return data == nullptr || safetensors::mapped_pages_written(data, bytes) == safetensors::PageWrites::unknown;
  }();
  bool reopen = false;  // a release left written pages: the next models stream a fresh map's clones
  // `again`: the canonical model built a second time, beside an order that differs.
  const auto build = [&](const std::vector<NamedTensor>& stream_order, const std::string& order, bool again,
                         const std::vector<std::size_t>& calls = {}) {
    // Each build a span of its own in the trace, as model B's: the pass's time is these builds.
    const Driver::SpanScope span(
        m_driver, open_span(again ? "stream-order model, canonical again" : "stream-order model", event.cycle, 0));
    const FreshMemoryAlike alike;  // Note [Fresh memory alike in every build]
    const std::string what = fmt::format("stream-order model ({} order)", order);
    // Note [Views streamed where nothing keeps them]: a view the loader kept, or a view of it,
    // outlives the load on the storage.
    const auto storage_refs = [](const torch::Tensor& t) -> std::size_t {
      return t.defined() && t.has_storage() ? t.storage().use_count() : 0;
    };
    std::vector<std::size_t> holders;
    holders.reserve(stream_order.size());
    for (const auto& t : stream_order) holders.push_back(storage_refs(t.tensor));
    const auto kept_a_view = [&] {
      for (std::size_t i = 0; i < stream_order.size(); ++i) {
        if (storage_refs(stream_order[i].tensor) > holders[i]) return true;
      }
      return false;
    };
    for (;;) {
      const bool clones = clone_streamed;
      torch::manual_seed(static_cast<std::uint64_t>(m_driver.seed()));
      std::unique_ptr<LifecycleModel> model = construct_quiet(what.c_str());
      if (refit) {
        load_dummy(*model, m_driver.seed());
        run_pwal(*model);
        m_phase = Phase::refit;
        call_model(Phase::refit, fmt::format("{} stage_for_refit()", what), [&] {
          torch::NoGradGuard no_grad;
          model->stage_for_refit();
          return 0;
        });
      }
      std::vector<std::size_t> starts = {0};
      starts.insert(starts.end(), calls.begin(), calls.end());
      starts.push_back(stream_order.size());
      for (std::size_t c = 0; c + 1 < starts.size(); ++c) {
        std::vector<NamedTensor> part(stream_order.begin() + static_cast<std::ptrdiff_t>(starts[c]),
                                      stream_order.begin() + static_cast<std::ptrdiff_t>(starts[c + 1]));
        const std::string call = starts.size() > 2 ? fmt::format(", call {} of {}", c + 1, starts.size() - 1) : "";
        TensorListWeightStream list(part, fmt::format("{}, {} order{}", event.source, order, call));
        m_phase = Phase::load;
        const std::string step = fmt::format("{} load_weights(){}", what, call);
        if (clones) {
          CloningStream stream(list);  // a loader that keeps what it is streamed shares nothing
          call_model(Phase::load, step, [&] { return model->load_weights(stream); });
        } else {
          AliasingStream stream(list);
          call_model(Phase::load, step, [&] { return model->load_weights(stream); });
        }
      }
      if (!clones && kept_a_view()) {
        // This loader keeps what it is streamed: this model again, and every later one, from clones.
        model.reset();
        release_pages();
        clone_streamed = true;
        continue;
      }
      release_pages();
      if (!clones) {
        // The release must have dropped every page a loader wrote (a locked map keeps them).
        const auto [data, bytes] = mapped_range();
        if (data != nullptr && safetensors::mapped_pages_written(data, bytes) != safetensors::PageWrites::clean) {
          clone_streamed = true;
          reopen = true;
        }
      }
      support::release_free_memory();  // the clones the loader copied from, the storage it replaced
      m_phase = Phase::pwal;
      run_pwal(*model);
      return model;
    }
  };
  // What each live tensor holds, by name: dtype, shape and the fingerprint of its bytes.
  const auto prints_of = [](LifecycleModel& model) {
    std::map<std::string, std::string> out;
    for (const auto& t : graphcheck::live_tensors(model)) {
      std::string print = "undefined";
      if (t.tensor.defined()) {
        print = fmt::format("{} {}", c10::toString(t.tensor.scalar_type()), shape_string(t.tensor.sizes()));
        if (t.tensor.numel() > 0 && t.tensor.layout() == c10::kStrided && !t.tensor.is_meta()) {
          print += fmt::format(" {:016x}", fingerprint(t.tensor));
        }
      }
      out.emplace(t.name, std::move(print));
    }
    return out;
  };
  const auto reopen_if_written = [&] {
    if (!reopen) return;
    open_weights();
    reopen = false;
  };
  std::unique_ptr<LifecycleModel> canonical = build(weights, "canonical", false);
  reopen_if_written();
  const std::map<std::string, std::string> canonical_prints = prints_of(*canonical);
  canonical.reset();  // one model at a time while the orders agree
  support::release_free_memory();
  for (const auto& [name, order, calls] : variants) {
    StreamOrderVariant v;
    v.order = name;
    v.calls = calls.size() + 1;
    std::vector<NamedTensor> stream_order;
    stream_order.reserve(order.size());
    for (std::size_t i : order) {
      stream_order.push_back(weights[i]);
      v.names.push_back(weights[i].name);
    }
    std::unique_ptr<LifecycleModel> model = build(stream_order, name, false, calls);
    reopen_if_written();
    if (prints_of(*model) != canonical_prints) {
      if (!canonical) {
        canonical = build(weights, "canonical", /*again=*/true);
        reopen_if_written();
      }
      v.differing = compare_live_after_orders(*canonical, *model, event.canonical);
    }
    event.variants.push_back(std::move(v));
  }
  measure(PhaseEvent{}, "gc/stream_order/orders", static_cast<double>(variants.size()), "orders");
  notify(&Probe::on_stream_orders_compared, event);
}

}  // namespace graphcheck::engine
