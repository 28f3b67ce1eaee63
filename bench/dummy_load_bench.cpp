// Dummy-load costs, measured through the real dummy loader and fixtures:
//  - Engram table (float8_e4m3fn rows + UE8M0 scales) filled with its declared constants vs at
//    random (engram.random_fill), at GRAPHCHECK_BENCH_TABLE_GIB GiB of rows (default 1);
//  - deep_stack dummy load against depth, clean vs dummy.recursive_init.
// After the runs it prints ratios of times measured in this same run, never absolute claims.

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdlib>
#include <map>

#include "dummy_loader.h"
#include "graphcheck/model.h"
#include "graphcheck/mutation.h"

namespace gc = graphcheck;

namespace {

constexpr std::int64_t kDim = 64;  // float8 bytes per row

std::int64_t table_rows() {
  const char* env = std::getenv("GRAPHCHECK_BENCH_TABLE_GIB");
  const double gib = env ? std::atof(env) : 1.0;
  return static_cast<std::int64_t>(gib * (1ll << 30)) / kDim;
}

std::unique_ptr<gc::LifecycleModel> make(const std::string& fixture, gc::ModelConfig config) {
  return gc::ModelRegistry::get().find(fixture)->factory(config);
}

void BM_EngramDummyFill(benchmark::State& state) {
  const bool random = state.range(0) != 0;
  std::set<std::string> mutations;
  if (random) mutations.insert("engram.random_fill");
  gc::mutation::Scope scope(mutations);
  gc::ModelConfig config;
  config.set("rows", table_rows());
  config.set("dim", kDim);
  auto model = make("engram", config);
  for (auto _ : state) {
    auto names = gc::dummy_load(*model, 1);
    benchmark::DoNotOptimize(names.data());
  }
  const std::int64_t bytes = table_rows() * kDim + table_rows() * (kDim / 32);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["table_GiB"] = static_cast<double>(bytes) / (1ll << 30);
  state.SetLabel(random ? "random (engram.random_fill)" : "constant (dummy_weight_value)");
}
BENCHMARK(BM_EngramDummyFill)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_DeepStackDummyLoad(benchmark::State& state) {
  const std::int64_t depth = state.range(0);
  const bool recursive = state.range(1) != 0;
  std::set<std::string> mutations;
  if (recursive) mutations.insert("dummy.recursive_init");
  gc::mutation::Scope scope(mutations);
  gc::ModelConfig config;
  config.set("depth", depth);
  config.set("width", std::int64_t{4096});
  auto model = make("deep_stack", config);
  std::int64_t writes = 0;
  for (auto _ : state) {
    writes = 0;
    gc::dummy_load(*model, 1, [&](const std::string&, const auto&) { ++writes; });
  }
  state.counters["writes"] = static_cast<double>(writes);
  state.counters["tensors"] = static_cast<double>(2 * depth);
  state.SetLabel(recursive ? "dummy.recursive_init" : "clean");
}
BENCHMARK(BM_DeepStackDummyLoad)
    ->ArgsProduct({{1, 4, 16, 64}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// Keeps each run's time per iteration so the ratios can be printed at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const auto& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        m_seconds[r.benchmark_name()] = r.real_accumulated_time / static_cast<double>(r.iterations);
      }
    }
  }
  [[nodiscard]] double seconds(const std::string& name) const {
    auto it = m_seconds.find(name);
    return it == m_seconds.end() ? 0.0 : it->second;
  }

 private:
  std::map<std::string, double> m_seconds;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const double constant = reporter.seconds("BM_EngramDummyFill/0/iterations:3");
  const double random = reporter.seconds("BM_EngramDummyFill/1/iterations:3");
  fmt::print("\nratios (same run):\n");
  if (constant > 0 && random > 0) {
    fmt::print("  engram table dummy fill: random / constant = {:.2f}x\n", random / constant);
  }
  for (int recursive : {0, 1}) {
    const double d1 = reporter.seconds(fmt::format("BM_DeepStackDummyLoad/1/{}", recursive));
    const double d64 = reporter.seconds(fmt::format("BM_DeepStackDummyLoad/64/{}", recursive));
    if (d1 > 0 && d64 > 0) {
      fmt::print("  deep_stack dummy load, {}: time(depth 64) / time(depth 1) = {:.1f}x "
                 "(tensors grow 64x)\n",
                 recursive ? "dummy.recursive_init" : "clean", d64 / d1);
    }
  }
  const double clean64 = reporter.seconds("BM_DeepStackDummyLoad/64/0");
  const double rec64 = reporter.seconds("BM_DeepStackDummyLoad/64/1");
  if (clean64 > 0 && rec64 > 0) {
    fmt::print("  depth 64: dummy.recursive_init / clean = {:.1f}x\n", rec64 / clean64);
  }
  benchmark::Shutdown();
  return 0;
}
