// Scale (issue "Reliability", item 9): the `synthetic` fixture through the whole lifecycle, once
// without probes (checks: []) and once with every probe, in the same process and run. Reports
// the wall time of each, the probes' overhead as their ratio, and the process's peak RSS after
// each (ru_maxrss only grows: the baseline runs first).
//
//   GRAPHCHECK_SCALE_TENSORS  (default 10000)   GRAPHCHECK_SCALE_GIB  (default 2)
//   GRAPHCHECK_SCALE_WORK_DIR (default /tmp/graphcheck-scale): the generated checkpoints
//
// Run: OMP_NUM_THREADS=1 build/bench/scale_bench (bench/scale/run.sh runs the CLI on the same
// model and reports the same figures).

#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "graphcheck/engine/driver.h"
#include "graphcheck/probe.h"
#include "graphcheck/engine/scenario.h"

namespace gc = graphcheck;

namespace {

double env_or(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

double peak_rss_gib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1 << 20);  // KiB -> GiB
}

gc::Scenario scale_scenario(bool probes) {
  const auto tensors = static_cast<std::int64_t>(env_or("GRAPHCHECK_SCALE_TENSORS", 10000));
  const auto bytes = static_cast<std::int64_t>(env_or("GRAPHCHECK_SCALE_GIB", 2) * (1ll << 30));
  gc::Scenario s;
  s.name = probes ? "synthetic-scale" : "synthetic-scale-noprobes";
  s.file = "bench/scale_bench.cpp";
  s.fixture = "synthetic";
  s.config.set("tensors", tensors);
  s.config.set("bytes", bytes);
  s.config.set("depth", std::int64_t{8});
  s.config.set("dtypes", std::string("float32,bfloat16,float16"));
  s.seed = 91;
  s.batch_sizes = {1, 4};
  gc::RefitSpec all;
  all.seed = 92;
  gc::RefitSpec subset;
  subset.seed = 93;
  subset.only = {"child.child."};
  s.cycles = {all, subset};
  if (probes) s.checks = gc::ProbeRegistry::get().names();
  return s;
}

void BM_ScaleLifecycle(benchmark::State& state) {
  gc::set_intra_op_threads(1);
  gc::RunOptions options;
  options.work_dir = std::getenv("GRAPHCHECK_SCALE_WORK_DIR") ? std::getenv("GRAPHCHECK_SCALE_WORK_DIR")
                                                              : "/tmp/graphcheck-scale";
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const gc::ScenarioRecord base = gc::run_scenario(scale_scenario(false), options);
    const double base_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double base_rss = peak_rss_gib();
    const auto t1 = std::chrono::steady_clock::now();
    const gc::ScenarioRecord full = gc::run_scenario(scale_scenario(true), options);
    const double full_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (base.status != gc::Status::passed || full.status != gc::Status::passed) {
      state.SkipWithError(fmt::format("a run did not pass: {} {}, {} {}", gc::to_string(base.status), base.reason,
                                      gc::to_string(full.status), full.reason)
                              .c_str());
      return;
    }
    state.counters["baseline_s"] = base_s;
    state.counters["probes_s"] = full_s;
    state.counters["probes_over_baseline"] = full_s / base_s;
    state.counters["peak_rss_GiB_baseline"] = base_rss;
    state.counters["peak_rss_GiB_probes"] = peak_rss_gib();
    state.counters["passes"] = static_cast<double>(full.passes.size());
  }
  state.counters["tensors"] = env_or("GRAPHCHECK_SCALE_TENSORS", 10000);
  state.counters["weights_GiB"] = env_or("GRAPHCHECK_SCALE_GIB", 2);
}
BENCHMARK(BM_ScaleLifecycle)->Unit(benchmark::kSecond)->Iterations(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
