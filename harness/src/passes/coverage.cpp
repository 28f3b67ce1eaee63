// The coverage pass's perturbation (the coverage probe judges what it measures). Live tensors
// are perturbed in place around a replay and an eager run on the compare's inputs, then restored.
//
// Cost: when replay = eager before any perturbation, all tensors are perturbed at once and groups
// are bisected only where replay and eager then disagree: one replay + one eager forward for a
// clean graph, O(k log n) for k uncovered tensors among n, after one unperturbed replay + eager
// forward (Note [Tensors the forward writes]). When replay already differs from eager (a stale
// read the differential reports), each tensor is tried alone, at most kMaxSingles of them, those
// the graph reads first.
//
// Memory: the float and byte tensors that are one dense region of their own are
// perturbed in place by a bijection of their bit patterns and put back by its inverse (Note [A
// perturbation undone exactly], perturb_bits.h; on a device by libtorch's ops, 16 MiB at a time);
// only the others are copied before they are perturbed (fp8, conjugate and negative views, views
// with gaps, views that share bytes with another candidate, tensors the forward writes: Note
// [Tensors the forward writes]).

#include <torch/types.h>

#include <algorithm>
#include <map>
#include <exception>
#include <optional>
#include <set>

#include "fingerprint.h"
#include "output_diff.h"
#include "passes/passes.h"
#include "perturb_bits.h"
#include "tensor_pieces.h"

namespace graphcheck::passes {
namespace {

constexpr std::size_t kMaxSingles = 256;

bool perturbable(const torch::Tensor& t) {
  return t.defined() && t.has_storage() && t.numel() > 0 &&
         (c10::isFloatingType(t.scalar_type()) || t.scalar_type() == torch::kUInt8);
}

// The bit-pattern bijection that perturbs `t` in place, where `t` can take one: one dense region
// of data (a meta tensor has none to fingerprint), in a format perturb_bits.h knows.
std::optional<perturb::Format> in_place_format(const torch::Tensor& t) {
  if (t.is_meta() || t.is_conj() || t.is_neg() || !t.is_non_overlapping_and_dense()) return std::nullopt;
  switch (t.scalar_type()) {
    case torch::kHalf: return perturb::Format::binary16;
    case torch::kBFloat16: return perturb::Format::bfloat16;
    case torch::kFloat32: return perturb::Format::binary32;
    case torch::kFloat64: return perturb::Format::binary64;
    case torch::kUInt8: return perturb::Format::byte;
    default: return std::nullopt;
  }
}

// perturb_bits.h's byte bijection in libtorch's ops, on a view of any strides.
void flip_bytes_by_ops(torch::Tensor& v, bool forward) {
  torch::Tensor next = v.bitwise_xor(1);  // the masks from v, one at a time: two pieces held at most
  next.masked_fill_(v.eq(252), forward ? 253 : 254);
  next.masked_fill_(v.eq(253), forward ? 254 : 252);
  next.masked_fill_(v.eq(254), forward ? 252 : 253);
  next.masked_fill_(v.eq(255), 255);
  v.copy_(next);
}

// The perturbation of a tensor that is copied first: x * 1.125 + 1/64 for floats; for bytes the
// bijection's (perturb_bits.h), so that a byte tensor moves alike in any layout.
void perturb_copied(torch::Tensor& t) {
  torch::NoGradGuard no_grad;
  if (t.scalar_type() == torch::kUInt8) {
    flip_bytes_by_ops(t, true);
  } else if (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kFloat64) {
    t.mul_(1.125).add_(0.015625);  // the same roundings as below, without temporaries
  } else {
    torch::Tensor wide = t.to(torch::kFloat32);
    wide.mul_(1.125).add_(0.015625);
    t.copy_(wide);
  }
}

// The integer dtype of a format's patterns (a view of the tensor's bytes).
torch::ScalarType bits_dtype(perturb::Format format) {
  switch (format) {
    case perturb::Format::binary16:
    case perturb::Format::bfloat16: return torch::kInt16;
    case perturb::Format::binary32: return torch::kInt32;
    case perturb::Format::binary64: return torch::kInt64;
    case perturb::Format::byte: break;
  }
  return torch::kUInt8;
}

template <class L>
void flip_by_ops(torch::Tensor& v, bool forward) {
  // The constants lie below the sign bit, so the signed view holds them as they are.
  const auto as_value = [](typename L::bits b) { return static_cast<std::int64_t>(b); };
  torch::Tensor rest = v.bitwise_and(as_value(typename L::bits(~(L::kSign | L::kTop))));
  const torch::Tensor zero = rest.eq(0), sixty_fourth = rest.eq(as_value(L::kSixtyFourth));
  rest = torch::Tensor();
  const torch::Tensor special = v.bitwise_and(as_value(L::kExponent)).eq(as_value(L::kExponent));
  torch::Tensor flips = zero.logical_or(sixty_fourth).to(v.scalar_type()).mul_(as_value(L::kSixtyFourth));
  const torch::Tensor keep_m = (forward ? zero : sixty_fourth).logical_or(special);
  flips.bitwise_or_(keep_m.logical_not().to(v.scalar_type()).mul_(as_value(L::kTop)));
  v.bitwise_xor_(flips);
}

}  // namespace

// The bijection of perturb_bits.h in libtorch's ops, for a tensor that is one dense region on a
// device (the loops there read host memory): a piece of at most `piece_bytes` at a time, so that
// its temporaries stay bounded whatever the tensor's size (at most 4.5 pieces' bytes, float16's
// masks of a byte per element; bytes 2).
void detail::perturb_by_ops(const torch::Tensor& t, perturb::Format format, bool forward,
                            std::int64_t piece_bytes) {
  torch::NoGradGuard no_grad;
  const torch::Tensor bits = t.as_strided({t.numel()}, {1}).view(bits_dtype(format));
  const std::int64_t step =
      std::max<std::int64_t>(1, piece_bytes / static_cast<std::int64_t>(bits.element_size()));
  const auto flip = [&](torch::Tensor v, bool direction) {
    switch (format) {
      case perturb::Format::binary16: return flip_by_ops<perturb::Binary16>(v, direction);
      case perturb::Format::bfloat16: return flip_by_ops<perturb::BFloat16>(v, direction);
      case perturb::Format::binary32: return flip_by_ops<perturb::Binary32>(v, direction);
      case perturb::Format::binary64: return flip_by_ops<perturb::Binary64>(v, direction);
      case perturb::Format::byte: return flip_bytes_by_ops(v, direction);
    }
  };
  std::int64_t at = 0;
  try {
    for (; at < bits.numel(); at += step) {
      flip(bits.narrow(0, at, std::min(step, bits.numel() - at)), forward);
    }
  } catch (...) {
    // A piece that failed (out of device memory) wrote nothing: its xor or copy is its last op.
    // The pieces before it go back, as far as the device lets them, so that the tensor is whole.
    try {
      for (std::int64_t back = 0; back < at; back += step) {
        flip(bits.narrow(0, back, std::min(step, bits.numel() - back)), !forward);
      }
    } catch (...) {
    }
    throw;
  }
}

namespace {

// A candidate, and the bijection that perturbs it in place (none: it is copied first).
struct Candidate {
  NamedTensor tensor;
  std::optional<perturb::Format> in_place;
};

// The bytes a view spans on its device, from its first element to the end of its last.
struct Span {
  std::string device;
  std::uintptr_t first = 0, end = 0;
  auto operator<=>(const Span&) const = default;
};

Span span_of(const torch::Tensor& t) {
  std::int64_t last = 0;
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  const auto first = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  const auto bytes = (last + 1) * static_cast<std::int64_t>(t.element_size());
  return {t.device().str(), first, first + static_cast<std::uintptr_t>(bytes)};
}

// A bijection applied twice to bytes two candidates share undoes itself, so a candidate perturbs
// in place only where its bytes are its own.
void choose_in_place(std::vector<Candidate>& candidates) {
  std::vector<std::pair<Span, std::size_t>> spans;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    candidates[i].in_place = in_place_format(candidates[i].tensor.tensor);
    spans.push_back({span_of(candidates[i].tensor.tensor), i});
  }
  std::sort(spans.begin(), spans.end());
  std::uintptr_t reach = 0;  // the furthest end of the spans before on the same device
  std::size_t reacher = 0;   // the candidate that reaches it
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const auto& [span, i] = spans[k];
    const bool same_device = k > 0 && spans[k - 1].first.device == span.device;
    if (same_device && span.first < reach) {
      candidates[i].in_place.reset();
      candidates[reacher].in_place.reset();
    }
    if (!same_device || span.end > reach) {
      reach = span.end;
      reacher = i;
    }
  }
}

// The pieces the ops take on a device: 16 MiB, so that their temporaries (4.5 pieces at most,
// detail::perturb_by_ops) stay near one of kDevicePieceBytes.
constexpr std::int64_t kPerturbPieceBytes = kDevicePieceBytes / 4;

// The bijection, or its inverse, on a dense tensor: the loops on the host, libtorch's ops in
// pieces on a device. A write, as the ops' and the copy's were: the loops bump the version counter
// as an in-place op would, for whoever watches it (a cache keyed on it, write_count.h).
void apply(perturb::Format format, const torch::Tensor& t, bool forward) {
  if (!t.device().is_cpu()) return detail::perturb_by_ops(t, format, forward, kPerturbPieceBytes);
  if (forward) perturb::apply_forward(format, t.data_ptr(), t.numel());
  else perturb::apply_backward(format, t.data_ptr(), t.numel());
  if (!t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
}

// Perturbs a group (the constructor, which leaves nothing perturbed when it throws) and puts it
// back exactly (restore(), which tries every tensor and then throws the first failure).
class PerturbedGroup {
 public:
  explicit PerturbedGroup(const std::vector<const Candidate*>& group) : m_group(group) {
    torch::NoGradGuard no_grad;
    for (const Candidate* c : m_group) {
      if (!c->in_place) m_saved.push_back(c->tensor.tensor.clone());
    }
    try {
      for (const Candidate* c : m_group) {
        torch::Tensor live = c->tensor.tensor;
        if (c->in_place) {
          apply(*c->in_place, live, true);  // whole, or, when it throws, not at all
          ++m_perturbed;
        } else {
          ++m_perturbed;  // its copy puts it back whatever part of it was perturbed
          perturb_copied(live);
        }
      }
    } catch (...) {
      restore_quietly();
      throw;
    }
  }
  PerturbedGroup(const PerturbedGroup&) = delete;
  PerturbedGroup& operator=(const PerturbedGroup&) = delete;
  ~PerturbedGroup() { restore_quietly(); }

  // The copied ones (tensors a forward writes) put back and perturbed again: a forward that ran
  // since may have written them (Note [One perturbation for a cycle's graphs]).
  void perturb_copied_again() {
    torch::NoGradGuard no_grad;
    std::size_t saved = 0;
    for (std::size_t i = 0; i < m_perturbed; ++i) {
      const Candidate* c = m_group[i];
      if (c->in_place) continue;
      torch::Tensor live = c->tensor.tensor;
      live.copy_(m_saved[saved++]);
      perturb_copied(live);
    }
  }

  void restore() {
    torch::NoGradGuard no_grad;
    std::exception_ptr first;
    std::size_t saved = 0;
    for (std::size_t i = 0; i < m_perturbed; ++i) {
      const Candidate* c = m_group[i];
      torch::Tensor live = c->tensor.tensor;
      try {
        if (c->in_place) apply(*c->in_place, live, false);
        else live.copy_(m_saved[saved]);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      if (!c->in_place) ++saved;
    }
    m_perturbed = 0;
    if (first) std::rethrow_exception(first);
  }

 private:
  void restore_quietly() noexcept {
    try {
      restore();
    } catch (...) {
    }
  }

  const std::vector<const Candidate*>& m_group;
  std::vector<torch::Tensor> m_saved;  // the originals of the copied ones, in group order
  std::size_t m_perturbed = 0;         // how many of the group, from its start, are perturbed
};

// Note [Tensors the forward writes]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The inverse puts a tensor back only if nothing else wrote it in between. A forward that writes
// a tensor it holds (a cache, a step buffer, a scale it updates, a lazy finalize) would leave the
// inverse of its own write there: 1.0 perturbed to 1.5, written 2.0 by the forward, "restored" to
// 3.0. A copy puts back the value before whatever the forward wrote. So one replay and eager run
// on the compare's inputs, unperturbed, goes first, with every candidate that would be perturbed
// in place fingerprinted before and after it: those it changed are copied instead. Two reads of
// the model and one more replay, where the copy was a write and two reads; raw writes (a Triton
// kernel, a CUDA graph) are seen as well as libtorch's in-place ops, which a version counter
// alone would see. A tensor the forward writes keeps what that run wrote, as after any extra forward.
void copy_the_written(std::vector<Candidate>& candidates, const std::vector<CoverageGraph>& graphs) {
  std::vector<std::uint64_t> before(candidates.size());
  bool any = false;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].in_place) continue;
    before[i] = fingerprint(candidates[i].tensor.tensor);
    any = true;
  }
  if (!any) return;
  for (const CoverageGraph& g : graphs) {
    ++g.out->replays;
    (void)g.replay_and_eager();
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].in_place) continue;
    if (fingerprint(candidates[i].tensor.tensor) != before[i]) candidates[i].in_place.reset();
  }
}

class Perturbation {
 public:
  Perturbation(const CompareEvent& compare, const ReplayAndEager& run, CoverageEvent& out)
      : m_compare(compare), m_run(run), m_out(out),
        m_baseline_agrees(outputs_agree(compare.replay_outputs, compare.eager_outputs, compare.tolerance)) {}

  [[nodiscard]] bool baseline_agrees() const { return m_baseline_agrees; }

  void classify(const Candidate& c) {
    const auto [replayed, eager] = perturbed_outputs({&c});
    const double tol = m_compare.tolerance;
    const bool replay_moved = !outputs_agree(replayed, m_compare.replay_outputs, tol);
    const bool eager_moved = !outputs_agree(eager, m_compare.eager_outputs, tol);
    const std::string& name = c.tensor.name;
    if (eager_moved && !replay_moved) m_out.uncovered.push_back(name);
    else if (replay_moved && !eager_moved) m_out.replay_only.push_back(name);
    else if (replay_moved && eager_moved && m_baseline_agrees && !outputs_agree(replayed, eager, tol)) m_out.partial.push_back(name);
  }

  // A group is covered when replay = eager with all of it perturbed; else split it.
  void bisect(const std::vector<const Candidate*>& group) {
    if (group.empty()) return;
    if (group.size() == 1) {
      classify(*group.front());
      return;
    }
    const auto [replayed, eager] = perturbed_outputs(group);
    if (agree(replayed, eager)) return;
    split(group);
  }
  // The halves of a group whose perturbed replay and eager disagree, each bisected.
  void split(const std::vector<const Candidate*>& group) {
    if (group.size() == 1) return classify(*group.front());
    const std::size_t half = group.size() / 2;
    bisect(std::vector<const Candidate*>(group.begin(), group.begin() + half));
    bisect(std::vector<const Candidate*>(group.begin() + half, group.end()));
  }
  [[nodiscard]] bool agree(const TensorList& replayed, const TensorList& eager) const {
    return outputs_agree(replayed, eager, m_compare.tolerance);
  }

 private:
  // Perturbs the tensors, replays and runs eager on the compare's inputs, restores them.
  std::pair<TensorList, TensorList> perturbed_outputs(const std::vector<const Candidate*>& group) {
    PerturbedGroup perturbed(group);
    ++m_out.replays;
    std::pair<TensorList, TensorList> outputs;
    try {
      outputs = m_run();
    } catch (...) {
      perturbed.restore();  // a failure here replaces the model's, as the copy's did
      throw;
    }
    perturbed.restore();
    return outputs;
  }

  const CompareEvent& m_compare;
  const ReplayAndEager& m_run;
  CoverageEvent& m_out;
  bool m_baseline_agrees;
};

}  // namespace

// Note [One perturbation for a cycle's graphs]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The graphs of one cycle (one per batch size) read the same live tensors. Each alone was a pass
// over every candidate's bytes for the fingerprints before and after its unperturbed run, and one
// to perturb and one to restore for its group: four passes over the model per graph, 1.3 s of the
// 10,000-tensor scale run's coverage pass (issue 26). So the graphs share them: the fingerprints
// around every graph's unperturbed run, and one perturbation of every candidate under which each
// graph whose baseline agreed replays and runs eager. Each graph keeps what it had alone:
//  - its own candidate list, built from the live tensors as alone: the tensors it reads first, and
//    a region two names share under the first name in that order;
//  - a group of one candidate is classified at once, as bisect() does;
//  - a graph whose outputs under the shared group differ bisects the halves of its group on its
//    own runs; one whose baseline already differed classifies tensors one at a time.
// Two things differ from alone, both on the side of perturbing more: a tensor any of the graphs'
// forwards writes is perturbed through a copy for all of them (Note [Tensors the forward
// writes]), and, since the graph before may have written it, it is put back and perturbed again
// before each graph runs. A forward that throws ends the measurement of every graph of the batch
// (the model's failure is the finding).
void measure_coverage(const std::vector<CoverageGraph>& graphs, std::vector<NamedTensor> live) {
  if (graphs.empty()) return;
  for (const CoverageGraph& g : graphs) g.out->replays = 0;
  // Each storage region once (the shared perturbation's list), and each graph's candidates.
  std::vector<Candidate> regions;
  std::map<std::pair<const void*, std::size_t>, std::size_t> region_of;
  for (auto& t : live) {
    if (!t.tensor.defined() || !perturbable(t.tensor)) continue;
    if (region_of.emplace(std::make_pair(t.tensor.data_ptr(), t.tensor.nbytes()), regions.size()).second) {
      regions.push_back({t, std::nullopt});
    }
  }
  choose_in_place(regions);
  copy_the_written(regions, graphs);
  std::vector<std::vector<Candidate>> candidates(graphs.size());
  for (std::size_t k = 0; k < graphs.size(); ++k) {
    std::set<std::string> read;
    for (const auto& r : graphs[k].graph->reads) read.insert(r.name);
    std::set<std::size_t> taken;
    for (int round = 0; round < 2; ++round) {
      for (const auto& t : live) {
        if (!t.tensor.defined() || !perturbable(t.tensor) || (read.count(t.name) > 0) != (round == 0)) continue;
        const std::size_t region = region_of.at({t.tensor.data_ptr(), t.tensor.nbytes()});
        if (taken.insert(region).second) candidates[k].push_back({t, regions[region].in_place});
      }
    }
    CoverageEvent& out = *graphs[k].out;
    out.graph = graphs[k].graph;
    out.tensors = static_cast<std::int64_t>(candidates[k].size());
  }
  std::vector<Perturbation> perturbations;
  perturbations.reserve(graphs.size());
  for (const CoverageGraph& g : graphs) perturbations.emplace_back(*g.compare, g.replay_and_eager, *g.out);
  // The shared group: every region, for the graphs whose baseline agrees (a group of one is
  // classified instead, as bisect() does). Whether each one's outputs agreed under it.
  std::vector<std::size_t> grouped;
  for (std::size_t k = 0; k < graphs.size(); ++k) {
    if (perturbations[k].baseline_agrees() && regions.size() > 1) grouped.push_back(k);
  }
  std::vector<bool> agreed(graphs.size(), false);
  if (!grouped.empty()) {
    std::vector<const Candidate*> all;
    for (const auto& c : regions) all.push_back(&c);
    PerturbedGroup perturbed(all);
    try {
      for (std::size_t n = 0; n < grouped.size(); ++n) {
        const std::size_t k = grouped[n];
        if (n > 0) perturbed.perturb_copied_again();
        ++graphs[k].out->replays;
        const auto [replayed, eager] = graphs[k].replay_and_eager();
        agreed[k] = perturbations[k].agree(replayed, eager);
      }
    } catch (...) {
      perturbed.restore();  // a failure here replaces the model's, as the copy's did
      throw;
    }
    perturbed.restore();
  }
  for (std::size_t k = 0; k < graphs.size(); ++k) {
    CoverageEvent& out = *graphs[k].out;
    Perturbation& p = perturbations[k];
    std::vector<const Candidate*> order;
    for (const auto& c : candidates[k]) order.push_back(&c);
    if (p.baseline_agrees()) {
      out.method = "group bisection";
      if (order.size() == 1) p.classify(*order.front());
      else if (order.size() > 1 && !agreed[k]) p.split(order);
    } else {
      out.method = "one tensor at a time (replay already differs from eager)";
      for (std::size_t i = 0; i < order.size() && i < kMaxSingles; ++i) p.classify(*order[i]);
    }
  }
}

void measure_coverage(const GraphView& graph, std::vector<NamedTensor> live, const CompareEvent& compare,
                      const ReplayAndEager& replay_and_eager, CoverageEvent& out) {
  measure_coverage(std::vector<CoverageGraph>{{&graph, &compare, replay_and_eager, &out}}, std::move(live));
}

}  // namespace graphcheck::passes
