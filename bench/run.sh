#!/usr/bin/env bash
# Builds the benchmarks, runs them (one libtorch thread, as CI runs), writes every result into
# reports/out/bench.json and prints one table: each ratio, its target, met or missed. Every ratio
# divides two figures measured in the same run (a baseline and the thing measured), never a
# figure against a constant from another machine.
#
#   bench/run.sh              everything (about 10 minutes on 2 cores)
#   bench/run.sh --quick      sizes up to 64 MiB, no suite/kill-matrix timing, no growth curve
#   bench/run.sh --growth     also the dsv4 growth curve (time and peak RSS vs layers and hidden)
#
#   GRAPHCHECK_BUILD_DIR      build tree (default build)
#   GRAPHCHECK_BENCH_DSV4     the grown dsv4 (default 32x1024: layers x hidden)
#   GRAPHCHECK_SCALE_TENSORS / GRAPHCHECK_SCALE_GIB   the synthetic scale model (10000, 0.5)
#   GRAPHCHECK_BENCH_MAX_MIB  the largest scan size (default 1024; --quick: 64)
#   GRAPHCHECK_BENCH_REPETITIONS  runs of each harness_bench benchmark, interleaved; the median counts (3)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh

quick=0 growth=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    --growth) growth=1 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/run.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

build="${GRAPHCHECK_BUILD_DIR:-build}"
out=reports/out
mkdir -p "$out/bench"
bash ci/setup.sh
if [[ ! -f $build/CMakeCache.txt ]]; then
  generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" --parallel "$(cores)" --target harness_bench lifecycle_bench graphcheck

export OMP_NUM_THREADS=1
if ((quick)); then export GRAPHCHECK_BENCH_MAX_MIB=${GRAPHCHECK_BENCH_MAX_MIB:-64}; fi
export GRAPHCHECK_BENCH_MAX_MIB=${GRAPHCHECK_BENCH_MAX_MIB:-1024}
export GRAPHCHECK_BENCH_WORK_DIR=${GRAPHCHECK_BENCH_WORK_DIR:-$out/bench/work}
if ((growth)); then export GRAPHCHECK_BENCH_DSV4_GROWTH=${GRAPHCHECK_BENCH_DSV4_GROWTH:-8x1024,16x1024,8x2048}; fi

run_bench() {  # binary filter json [more options]
  echo "--- $1 --benchmark_filter='$2'" >&2
  "$build/bench/$1" --benchmark_filter="$2" --benchmark_out="$3" --benchmark_out_format=json \
    --benchmark_format=console "${@:4}" >&2
}
# The scan sizes: only 64 MiB and up carry a target, smaller ones show the cache's effect.
# Each benchmark runs $GRAPHCHECK_BENCH_REPETITIONS times, in random order among the others, and
# report.py takes the median: this machine's memory bandwidth drifts by 20% over minutes, and a
# scan measured at one moment against a memcpy measured at another read as missed.
# Each run for 0.2 s (benchmarks that set their own minimum keep it), not the default 0.5 s: three
# runs then take about what one took.
reps=${GRAPHCHECK_BENCH_REPETITIONS:-3}
run_bench harness_bench -BM_RecordedLoad "$out/bench/harness.json" --benchmark_repetitions="$reps" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time=0.2
# The recorded load in a process of its own: its 100,000 tensors and their records, interleaved
# with the address benchmarks, left them a heap whose records lay scattered (the snapshot at
# 100,000 tensors 268 -> 665 ns, its linearity above the names floor 3.7x -> 11.5x).
run_bench harness_bench BM_RecordedLoad "$out/bench/recorded-load.json" --benchmark_repetitions="$reps" \
  --benchmark_enable_random_interleaving=true --benchmark_min_time=0.2
# lifecycle_bench runs its scenarios in its own process; graphcheck runs each in a child whose heap
# asks for huge pages (Note [Huge pages for the scenario's heap], harness/src/session/runner.cpp):
# the same environment here, for the eager work and the harness alike.
scenario_tunables=${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1
[[ ${GLIBC_TUNABLES:-} == *glibc.malloc.hugetlb* ]] && scenario_tunables=$GLIBC_TUNABLES
GLIBC_TUNABLES=$scenario_tunables run_bench lifecycle_bench 'BM_Lifecycle/' "$out/bench/lifecycle.json"
# Peak RSS only grows: one process per model.
rss_models=$("$build/bench/lifecycle_bench" --benchmark_list_tests | sed -n 's|^BM_PeakRss/\([^/]*\)/.*|\1|p')
for m in $rss_models; do
  GLIBC_TUNABLES=$scenario_tunables run_bench lifecycle_bench "^BM_PeakRss/$m/" "$out/bench/rss-$m.json"
done

# The suite and the kill matrix, with the thread cap (--threads 1, the default) and without it
# (--threads 0: libtorch's default of one thread per core).
timings="$out/bench/suite-times.txt"
: >"$timings"
if ((!quick)); then
  for threads in 1 0; do
    for cmd in run mutants; do
      t0=$(date +%s%N)
      env -u OMP_NUM_THREADS "$build/bin/graphcheck" "$cmd" scenarios/ --threads "$threads" \
        --report-dir "$out/bench/$cmd-threads-$threads" >"$out/bench/$cmd-threads-$threads.log" 2>&1 \
        || echo "bench/run.sh: graphcheck $cmd --threads $threads failed (see $out/bench/$cmd-threads-$threads.log)" >&2
      t1=$(date +%s%N)
      echo "$cmd $threads $(((t1 - t0) / 1000000))" >>"$timings"  # milliseconds
    done
  done
fi

py=python3
[[ -x ${GRAPHCHECK_VENV:-$HOME/.cache/graphcheck/venv}/bin/python ]] && py="${GRAPHCHECK_VENV:-$HOME/.cache/graphcheck/venv}/bin/python"
"$py" bench/report.py "$out/bench" "$out/bench.json"
