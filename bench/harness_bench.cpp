// The harness's own hot paths, each against a baseline measured in the same run (issue 13):
//  - content fingerprint, poison fill and poison survivor scan vs memcpy, 1 MiB .. 1 GiB, one
//    thread (bytes_per_second; bench/run.sh divides by BM_Memcpy's at the same size);
//  - the floor under a scan of two arrays (BM_ReadTwo: reading both, nothing else) vs memcpy;
//  - the census's scan of a region in another layout than its checkpoint record (a shard of dim
//    1, a transposed weight) vs memcpy, beside the same scan with the region copied whole first
//    (as before Note [Scans in logical order]) and the reading of the shard's rows alone;
//  - fingerprint of a transposed (non-contiguous) view vs memcpy (rows of whole 1 KiB blocks, and
//    bfloat16 rows of 11,008 elements, which are not), and libtorch's transposing copy of the first
//    for reference;
//  - address snapshot (live_tensors + AddressIndex) and read resolution for 100 .. 100,000
//    tensors, 8 and 512 modules deep (ns_per_tensor), and the floor under any snapshot that
//    lists named tensors (BM_AddressFloor: copying each name and handle) and under any snapshot
//    at all (BM_AddressTouch: reading each live tensor's address and size);
//  - the coverage perturbation in place and back vs memcpy, float32 and bfloat16, beside the
//    saved copy it replaced;
//  - the stock loader (load_module_weights) and the checkpoint layout on the synthetic model, 1,000
//    to 100,000 tensors (ns_per_tensor; BM_ModuleLoad);
//  - emulated replay vs eager forward per fixture (replay_over_eager).
// Run: bench/run.sh (or build/bench/harness_bench --benchmark_filter=...). Sizes above 256 MiB
// only with GRAPHCHECK_BENCH_MAX_MIB=1024.

#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <emmintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "address_index.h"
#include "engine/streams.h"
#include "graphcheck/checkpoint.h"
#include "graphcheck/safetensors.h"
#include "backends/static_copy.h"
#include "fingerprint.h"
#include "graphcheck/engine/backend.h"
#include "graphcheck/model.h"
#include "graphcheck/engine/driver.h"
#include "perturb_bits.h"
#include "poison.h"
#include "synthetic_fill.h"

namespace gc = graphcheck;

namespace {

std::int64_t max_mib() {
  const char* env = std::getenv("GRAPHCHECK_BENCH_MAX_MIB");
  return env && *env ? std::atoll(env) : 256;
}

void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t mib = 1; mib <= max_mib(); mib *= 4) b->Arg(mib);  // 1 MiB .. 1 GiB
}

std::int64_t arg_bytes(const benchmark::State& state) { return state.range(0) << 20; }

// Random float32 values, faulted in.
torch::Tensor random_floats(std::int64_t bytes) {
  return torch::rand({bytes / 4}, torch::kFloat32);
}

void BM_Memcpy(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor src = random_floats(arg_bytes(state));
  torch::Tensor dst = torch::empty_like(src);
  dst.fill_(0);
  for (auto _ : state) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * src.nbytes());
}
BENCHMARK(BM_Memcpy)->Apply(sizes)->Unit(benchmark::kMicrosecond);

void BM_Fingerprint(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = random_floats(arg_bytes(state));
  for (auto _ : state) benchmark::DoNotOptimize(gc::fingerprint(t));
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_Fingerprint)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// A [rows, 1024] float matrix seen transposed: the layout a repacked weight often has.
void BM_FingerprintTransposed(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = random_floats(arg_bytes(state)).reshape({-1, 1024}).t();
  for (auto _ : state) benchmark::DoNotOptimize(gc::fingerprint(t));
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_FingerprintTransposed)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// A bfloat16 weight of 11,008 rows (LLaMA-2-7B's MLP width) stored transposed: the view's rows
// are 11,008 elements, 344 XXH3 stripes, not a whole number of 1 KiB blocks (Note [Rows of whole
// stripes]). The storage holds as many columns as fit the size.
void BM_FingerprintTransposedStripes(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  constexpr std::int64_t kWidth = 11008;
  const std::int64_t cols = std::max<std::int64_t>(2, arg_bytes(state) / (2 * kWidth));
  const torch::Tensor t = torch::rand({kWidth, cols}).to(torch::kBFloat16).t();
  for (auto _ : state) benchmark::DoNotOptimize(gc::fingerprint(t));
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_FingerprintTransposedStripes)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// An MoE layer's experts seen through transpose(1, 2): a stack of bfloat16 matrices of 2,816 x
// 4,096 (two MLP widths of 1,408 by a hidden size of 4,096), as many as fit the size, each read
// as 4,096 rows of 2,816 (Note [Strided fingerprints]).
torch::Tensor expert_stack(std::int64_t bytes) {
  constexpr std::int64_t kRows = 2 * 1408, kCols = 4096;
  const std::int64_t experts = std::max<std::int64_t>(1, bytes / (2 * kRows * kCols));
  return torch::rand({experts, kRows, kCols}).to(torch::kBFloat16).transpose(1, 2);
}

void BM_FingerprintExpertStack(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = expert_stack(arg_bytes(state));
  for (auto _ : state) benchmark::DoNotOptimize(gc::fingerprint(t));
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_FingerprintExpertStack)->Apply(sizes)->Unit(benchmark::kMicrosecond);

void BM_PoisonFillExpertStack(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = expert_stack(arg_bytes(state));
  for (auto _ : state) {
    gc::fill_poison(t);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_PoisonFillExpertStack)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// A reference for the rows of transposed views, not a floor: libtorch's own transposing copy of the same view
// into a buffer allocated once (no hash at all).
void BM_TransposeCopy(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = random_floats(arg_bytes(state)).reshape({-1, 1024}).t();
  torch::Tensor out = torch::empty(t.sizes(), t.options());
  for (auto _ : state) {
    out.copy_(t);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_TransposeCopy)->Apply(sizes)->Unit(benchmark::kMicrosecond);

void BM_PoisonFill(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor t = random_floats(arg_bytes(state));
  for (auto _ : state) {
    gc::fill_poison(t);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_PoisonFill)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// The coverage group test's perturbation of a tensor and its undoing (Note [A perturbation undone
// exactly]): in place and back, float32 (arg 0) or bfloat16 (arg 1). Two passes over the tensor,
// counted as twice its bytes (memcpy's count is one read and one write of them, as each pass's).
torch::Tensor perturbed_tensor(const benchmark::State& state) {
  torch::Tensor t = random_floats(arg_bytes(state));
  return state.range(1) == 0 ? t : t.view(torch::kBFloat16);
}

void BM_CoveragePerturb(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor t = perturbed_tensor(state);
  const auto format = state.range(1) == 0 ? gc::perturb::Format::binary32 : gc::perturb::Format::bfloat16;
  for (auto _ : state) {
    gc::perturb::apply_forward(format, t.data_ptr(), t.numel());
    gc::perturb::apply_backward(format, t.data_ptr(), t.numel());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * t.nbytes());
}
// 64 MiB and up (where the report's targets lie), float32 and bfloat16.
void perturb_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t mib = 64; mib <= std::max<std::int64_t>(64, max_mib()); mib *= 4) {
    for (std::int64_t kind : {0, 1}) b->Args({mib, kind});
  }
}
BENCHMARK(BM_CoveragePerturb)->Apply(perturb_sizes)->Unit(benchmark::kMicrosecond);

// The same as before: a saved copy, x * 1.125 + 1/64 (bfloat16 through float32), the copy put back.
void BM_CoveragePerturbCopied(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::NoGradGuard no_grad;
  torch::Tensor t = perturbed_tensor(state);
  for (auto _ : state) {
    const torch::Tensor saved = t.clone();
    if (t.scalar_type() == torch::kFloat32) {
      t.mul_(1.125).add_(0.015625);
    } else {
      torch::Tensor wide = t.to(torch::kFloat32);
      wide.mul_(1.125).add_(0.015625);
      t.copy_(wide);
    }
    t.copy_(saved);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * t.nbytes());
}
BENCHMARK(BM_CoveragePerturbCopied)->Apply(perturb_sizes)->Unit(benchmark::kMicrosecond);

// Synthesized checkpoint values (LifecycleModel::synthesize_checkpoint's default fill) against
// one in-place normal_ from a seeded generator. The fill it replaced did more: randn, a scaling
// pass and a conversion, so this baseline understates the gain.
void BM_SynthFill(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor t = random_floats(arg_bytes(state));
  for (auto _ : state) {
    gc::synth::fill_uniform(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()), gc::synth::stream_key(1, 0),
                            0.05f);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_SynthFill)->Apply(sizes)->Unit(benchmark::kMicrosecond);

void BM_RandnFill(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor t = random_floats(arg_bytes(state));
  torch::Generator gen = at::detail::createCPUGenerator(1);
  for (auto _ : state) {
    t.normal_(0.0, 0.03, gen);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_RandnFill)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// The refit case: a tensor that was poisoned and then (mostly) overwritten, scanned against the
// value it should hold. Arg 1: dtype (0 float32, 1 bfloat16, 2 uint8 sentinel).
torch::Tensor scan_subject(std::int64_t bytes, int kind, torch::Tensor& expected) {
  const torch::Tensor f = random_floats(bytes);
  torch::Tensor t;
  if (kind == 0) t = f;
  if (kind == 1) t = f.view(torch::kBFloat16);
  if (kind == 2) t = f.view(torch::kUInt8);
  expected = t.clone();
  gc::fill_poison(t.narrow(0, 0, t.numel() / 64));  // a few survivors at the front
  return t;
}

// The floor under a scan against an expected value: reading the two arrays and nothing else (an
// OR of every 16 bytes of both), counted like the scan (one array's bytes). Each array is read as
// the scans read (Note [Scans read four streams], four_streams.h): four parts side by side, 1 KiB of
// each in turn, eight streams of loads in flight. A scan that reads both arrays in full (uint8,
// where any byte can hold the pattern) cannot pass this; where it is under 0.8x memcpy, so is
// every such scan.
void BM_ReadTwo(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor a = random_floats(arg_bytes(state));
  const torch::Tensor b = random_floats(arg_bytes(state));
  const auto* pa = static_cast<const __m128i*>(a.data_ptr());
  const auto* pb = static_cast<const __m128i*>(b.data_ptr());
  constexpr std::int64_t kParts = 4, kPiece = 16;  // lines: 1 KiB
  const std::int64_t part = a.nbytes() / 64 / kParts / kPiece * kPiece;  // lines of each part
  for (auto _ : state) {
    __m128i x0 = _mm_setzero_si128(), x1 = x0, x2 = x0, x3 = x0;
    for (std::int64_t off = 0; off < part; off += kPiece) {
      for (std::int64_t s = 0; s < kParts; ++s) {
        for (std::int64_t line = s * part + off; line < s * part + off + kPiece; ++line) {
          const std::int64_t i = line * 4;
          x0 = _mm_or_si128(x0, _mm_or_si128(_mm_loadu_si128(pa + i), _mm_loadu_si128(pb + i)));
          x1 = _mm_or_si128(x1, _mm_or_si128(_mm_loadu_si128(pa + i + 1), _mm_loadu_si128(pb + i + 1)));
          x2 = _mm_or_si128(x2, _mm_or_si128(_mm_loadu_si128(pa + i + 2), _mm_loadu_si128(pb + i + 2)));
          x3 = _mm_or_si128(x3, _mm_or_si128(_mm_loadu_si128(pa + i + 3), _mm_loadu_si128(pb + i + 3)));
        }
      }
    }
    benchmark::DoNotOptimize(_mm_or_si128(_mm_or_si128(x0, x1), _mm_or_si128(x2, x3)));
  }
  state.SetBytesProcessed(state.iterations() * kParts * part * 64);
}
BENCHMARK(BM_ReadTwo)->Apply(sizes)->Unit(benchmark::kMicrosecond);

void BM_PoisonScan(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor expected;
  const torch::Tensor t = scan_subject(arg_bytes(state), static_cast<int>(state.range(1)), expected);
  std::int64_t found = 0;
  for (auto _ : state) {
    const gc::Survivors s = gc::count_survivors(t, expected);
    found = s.count;
    benchmark::DoNotOptimize(found);
  }
  // The scan reads both the tensor and its expected value.
  state.SetBytesProcessed(state.iterations() * t.nbytes());
  state.counters["survivors"] = static_cast<double>(found);
  state.SetLabel(state.range(1) == 0 ? "float32" : state.range(1) == 1 ? "bfloat16" : "uint8");
}
BENCHMARK(BM_PoisonScan)
    ->ArgsProduct({{1, 4, 16, 64, 256}, {0, 1, 2}})
    ->Unit(benchmark::kMicrosecond);

// A transposed float32 weight (a live tensor after PWAL) against model B's tensor of the same
// layout, nothing poisoned (Note [Scans in storage order]).
void BM_PoisonScanTransposed(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const torch::Tensor t = random_floats(arg_bytes(state)).reshape({-1, 1024}).t();
  const torch::Tensor expected = t.t().clone().t();
  for (auto _ : state) benchmark::DoNotOptimize(gc::count_survivors(t, expected).count);
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_PoisonScanTransposed)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// The census's scan of a live region in another layout than its checkpoint record (Note [Scans in
// logical order]): kind 0, a transposed float32 weight of 1,024 rows against its row-major
// record (a clean load: nothing holds the pattern); kind 1, a shard of dim 1 (half the columns of
// a fused float32 tensor, rows of 4 KiB) against its record; kind 2, kind 0 with the pattern in
// one element of the weight and of the record alike (no survivor, but the scan must pair the two).
std::pair<torch::Tensor, torch::Tensor> region_and_record(std::int64_t bytes, std::int64_t kind) {
  if (kind == 0 || kind == 2) {
    const torch::Tensor t = random_floats(bytes).reshape({1024, -1}).t();
    if (kind == 2) gc::fill_poison(t[t.size(0) / 2][17]);
    return {t, t.contiguous()};
  }
  const torch::Tensor fused = random_floats(2 * bytes).reshape({-1, 2048});
  const torch::Tensor t = fused.narrow(1, 1024, 1024);
  return {t, t.contiguous()};
}

void BM_PoisonScanVsRecord(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const auto [t, record] = region_and_record(arg_bytes(state), state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(gc::count_survivors(t, record).count);
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
void sizes_and_kinds(benchmark::internal::Benchmark* b, std::initializer_list<std::int64_t> kinds) {
  for (std::int64_t kind : kinds) {
    for (std::int64_t mib = 1; mib <= max_mib(); mib *= 4) b->Args({mib, kind});
  }
}
BENCHMARK(BM_PoisonScanVsRecord)
    ->Apply([](benchmark::internal::Benchmark* b) { sizes_and_kinds(b, {0, 1, 2}); })
    ->Unit(benchmark::kMicrosecond);

// The floor under the shard's scan: reading its rows alone, by libc's memcpy of each into one
// buffer that stays in cache (any scan of the shard reads every byte of its rows; a float32 scan
// reads its record only where the row holds the pattern). Each row is 4 KiB, half of a row of the
// fused tensor: a stream that starts anew at every row.
void BM_ReadShard(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const auto [t, record] = region_and_record(arg_bytes(state), 1);
  const auto* pt = static_cast<const std::byte*>(t.data_ptr());
  const std::int64_t rows = t.size(0), row_bytes = t.size(1) * 4, pitch = t.stride(0) * 4;
  std::vector<std::byte> row(static_cast<std::size_t>(row_bytes));
  for (auto _ : state) {
    for (std::int64_t r = 0; r < rows; ++r) std::memcpy(row.data(), pt + r * pitch, row.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_ReadShard)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// The same scans as they ran before: the region copied into logical order whole, then scanned.
void BM_PoisonScanVsRecordCopied(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  const auto [t, record] = region_and_record(arg_bytes(state), state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(gc::count_survivors(t.contiguous(), record).count);
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_PoisonScanVsRecordCopied)
    ->Apply([](benchmark::internal::Benchmark* b) { sizes_and_kinds(b, {0, 1}); })
    ->Unit(benchmark::kMicrosecond);

// Without an expected value (a staged tensor whose final value is unknown): the NaN pattern.
void BM_PoisonScanNoExpected(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::Tensor expected;
  const torch::Tensor t = scan_subject(arg_bytes(state), 0, expected);
  for (auto _ : state) benchmark::DoNotOptimize(gc::count_survivors(t, torch::Tensor()).count);
  state.SetBytesProcessed(state.iterations() * t.nbytes());
}
BENCHMARK(BM_PoisonScanNoExpected)->Apply(sizes)->Unit(benchmark::kMicrosecond);

// ---- addresses --------------------------------------------------------------------------------

std::unique_ptr<gc::LifecycleModel> synthetic(std::int64_t tensors, std::int64_t depth) {
  gc::ModelConfig config;
  config.set("tensors", tensors);
  config.set("bytes", tensors * 64);
  config.set("depth", depth);
  return gc::ModelRegistry::get().find("synthetic")->factory(config);
}

void address_sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t depth : {8, 512}) {
    for (std::int64_t n : {100, 1000, 10000, 100000}) b->Args({n, depth});
  }
}

// What the driver does at every capture: the live tensors (names built) and their index.
void BM_AddressSnapshot(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  auto model = synthetic(state.range(0), state.range(1));
  std::size_t n = 0;
  for (auto _ : state) {
    const gc::AddressIndex index(gc::live_tensors(*model));
    n = index.size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["tensors"] = static_cast<double>(n);
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddressSnapshot)->Apply(address_sizes)->Unit(benchmark::kMillisecond);

// ---- a module load ------------------------------------------------------------------------------

// The stock loader (load_module_weights: the checkpoint layout, then each streamed tensor copied
// into its region) on the synthetic model, n tensors of 64 bytes 8 modules deep, from a checkpoint
// held in memory: ns per tensor, the per-tensor bookkeeping of every load the lifecycle makes
// (model A's, model B's, each stream order's, each load_weights() call of a cut stream). With
// arg 1 = 1, the layout alone (checkpoint_layout()), which the census, the poison and the
// loaded-names check each take again per load.
void BM_ModuleLoad(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::NoGradGuard no_grad;
  auto model = synthetic(state.range(0), 8);
  const std::vector<gc::NamedTensor> checkpoint = model->synthesize_checkpoint(1);
  const bool layout_only = state.range(1) != 0;
  for (auto _ : state) {
    if (layout_only) {
      benchmark::DoNotOptimize(gc::checkpoint_layout(*model).size());
    } else {
      gc::TensorListWeightStream stream(checkpoint, "memory");
      benchmark::DoNotOptimize(model->load_weights(stream).size());
    }
  }
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(checkpoint.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ModuleLoad)->ArgsProduct({{1000, 10000, 100000}, {0, 1}})->Unit(benchmark::kMillisecond);

// The snapshot's first half alone: the walk that lists the live tensors by name, no index.
void BM_AddressWalk(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  auto model = synthetic(state.range(0), state.range(1));
  std::size_t n = 0;
  for (auto _ : state) {
    n = gc::live_tensors(*model).size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddressWalk)->Apply(address_sizes)->Unit(benchmark::kMillisecond);

// The floor under a snapshot that lists its tensors by name: a copy of each live tensor's name and
// handle from a list built beforehand, and a read of its data pointer and size, with no walk, no
// index and no sorting. At 512 modules deep every name is a kilobyte and more, and at 100,000
// tensors the copies leave the caches: the floor's own growth from 1,000 to 100,000 tensors is
// what the memory hierarchy charges any snapshot of named tensors (bench/run.sh prints it beside
// the snapshot's).
void BM_AddressFloor(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  auto model = synthetic(state.range(0), state.range(1));
  const std::vector<gc::NamedTensor> live = gc::live_tensors(*model);
  for (auto _ : state) {
    std::vector<gc::NamedTensor> copy;
    copy.reserve(live.size());
    std::uintptr_t sum = 0;
    for (const auto& t : live) {
      copy.push_back(t);
      sum += reinterpret_cast<std::uintptr_t>(copy.back().tensor.data_ptr()) + copy.back().tensor.nbytes();
    }
    benchmark::DoNotOptimize(sum);
    benchmark::DoNotOptimize(copy.data());
  }
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(live.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddressFloor)->Apply(address_sizes)->Unit(benchmark::kMillisecond);

// The least any snapshot of live addresses does: read each live tensor's data pointer and size
// through a handle listed beforehand, nothing copied, nothing named. The handles' tensor and
// storage records lie scattered over the heap; once 100,000 of them outgrow the caches each read
// waits on memory, and this floor's growth from 1,000 to 100,000 tensors is the least growth any
// snapshot can show on this machine (bench/run.sh prints it beside the snapshot's linearity).
void BM_AddressTouch(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  auto model = synthetic(state.range(0), state.range(1));
  const std::vector<gc::NamedTensor> live = gc::live_tensors(*model);
  for (auto _ : state) {
    std::uintptr_t sum = 0;
    for (const auto& t : live) sum += reinterpret_cast<std::uintptr_t>(t.tensor.data_ptr()) + t.tensor.nbytes();
    benchmark::DoNotOptimize(sum);
  }
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(live.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddressTouch)->Apply(address_sizes)->Unit(benchmark::kMillisecond);

// Resolving one interior pointer per tensor against the index.
void BM_AddressResolve(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  auto model = synthetic(state.range(0), state.range(1));
  const auto live = gc::live_tensors(*model);
  const gc::AddressIndex index(live);
  std::vector<gc::GraphRead> reads;
  for (const auto& t : live) {
    gc::GraphRead r;
    r.address = static_cast<const std::byte*>(t.tensor.data_ptr()) + t.tensor.nbytes() / 2;
    reads.push_back(r);
  }
  for (auto _ : state) benchmark::DoNotOptimize(gc::resolve_reads(reads, index).size());
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(reads.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_AddressResolve)->Apply(address_sizes)->Unit(benchmark::kMillisecond);

// ---- a recorded load ---------------------------------------------------------------------------

// A load as the lifecycle records it (engine/streams.h): n tensors of 1 KiB streamed from a
// generated checkpoint's map through a RecordingStream, each copied into a parameter; with
// written = 1 the loader first scales each tensor it is streamed in place, so that every record
// is read again from the file (reread_from_file). ns per tensor; bench/run.sh holds both to
// what the writes add per tensor (a reread that opened the file for each tensor made the written
// load quadratic).
void BM_RecordedLoad(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  torch::NoGradGuard no_grad;
  const std::int64_t n = state.range(0);
  const bool written = state.range(1) != 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("graphcheck-bench-load-" + std::to_string(::getpid()) + "-" + std::to_string(n) + ".safetensors"))
                               .string();
  std::vector<gc::NamedTensor> checkpoint;
  std::vector<torch::Tensor> params;
  for (std::int64_t i = 0; i < n; ++i) {
    checkpoint.push_back({"layers." + std::to_string(i / 100) + ".w" + std::to_string(i % 100),
                          torch::full({256}, static_cast<float>(i % 7), torch::kFloat32)});
    params.push_back(torch::empty({256}, torch::kFloat32));
  }
  gc::save_checkpoint(path, checkpoint, {}, gc::safetensors::Durability::scratch);
  checkpoint.clear();
  // Its header parsed once, as a run's first load of a checkpoint does; each load after takes the
  // validated header (Note [Validated headers]).
  (void)gc::safetensors::File::open(path);
  for (auto _ : state) {
    gc::SafetensorsWeightStream source(path, {}, {}, gc::StreamReads::mapped);
    std::map<std::string, torch::Tensor> records;
    double harness = 0;
    gc::engine::RecordingStream stream(source, records, harness, /*copy=*/false, gc::engine::reread_from_file(path));
    std::size_t i = 0;
    while (auto item = stream.next()) {
      if (written) item->tensor.mul_(2.0f);
      params[i++].copy_(item->tensor);
    }
    benchmark::DoNotOptimize(stream.finish().size());
  }
  std::filesystem::remove(path);
  state.counters["ns_per_tensor"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_RecordedLoad)
    ->ArgsProduct({{1000, 10000, 100000}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// ---- emulated replay vs eager -----------------------------------------------------------------

// Every registered fixture at its default config, dummy-loaded, at batch size 4: the time of a
// replay (inputs written into the static buffers) over the time of an eager forward, measured
// alternately in the same loop.
void BM_ReplayVsEager(benchmark::State& state, const std::string& fixture) {
  gc::set_intra_op_threads(1);
  torch::NoGradGuard no_grad;
  std::unique_ptr<gc::LifecycleModel> model;
  std::unique_ptr<gc::CapturedGraph> graph;
  gc::TensorList inputs;
  auto backend = gc::make_backend("emulated").backend;
  try {
    model = gc::ModelRegistry::get().find(fixture)->factory(gc::ModelConfig{});
    // As the driver does: inference weights.
    for (auto& p : model->module().parameters(true)) p.requires_grad_(false);
    model->load_dummy_weights(1);
    model->process_weights_after_loading();
    inputs = model->make_inputs(4, 7);
    model->forward_all(inputs);  // warm-up
    graph = backend->capture(*model, inputs, 4);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  constexpr int kReps = 20;
  double eager = 0, replay = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) benchmark::DoNotOptimize(model->forward_all(inputs));
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) {
      for (std::size_t k = 0; k < inputs.size(); ++k) gc::copy_static(graph->static_inputs()[k], inputs[k]);  // as PassRun::write_inputs
      graph->replay();
    }
    const auto t2 = std::chrono::steady_clock::now();
    eager += std::chrono::duration<double>(t1 - t0).count();
    replay += std::chrono::duration<double>(t2 - t1).count();
  }
  state.counters["replay_over_eager"] = replay / eager;
}

}  // namespace

int main(int argc, char** argv) {
  // Registered here, not in a static initialiser: the fixtures register themselves in theirs.
  for (const auto& name : gc::ModelRegistry::get().names()) {
    benchmark::RegisterBenchmark(("BM_ReplayVsEager/" + name).c_str(),
                                 [name](benchmark::State& s) { BM_ReplayVsEager(s, name); })
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.3);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
