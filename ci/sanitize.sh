#!/usr/bin/env bash
# An ASan + UBSan build of the library, the CLI and the tests (in ${GRAPHCHECK_SANITIZE_BUILD_DIR:-
# build-asan}), then every test under it: unit, end-to-end (the scenario suite, every mutation,
# the crash isolation), reports. libtorch itself is not instrumented; what it reports is
# suppressed in ci/sanitizer/*.supp, each line with its reason. Any other report fails the run.
#
#   GRAPHCHECK_SANITIZE_TESTS    a ctest -R regex to run a subset (default: all)
#   GRAPHCHECK_SANITIZE_EXCLUDE  a ctest -E regex of tests left out. Default: the sharding test and
#       the merge of its shards
#       (three more runs of the whole suite, for orchestration only) and the two that open the HTML
#       in Chromium; they add no sanitizer coverage and run in the CPU build's stage of .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
bash ci/setup.sh
build="${GRAPHCHECK_SANITIZE_BUILD_DIR:-build-asan}"
generator=()
if [[ ! -f $build/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# -O1 -g1: ASan's usual optimisation, and line tables for its stack traces at little compile cost.
# -DNDEBUG as libtorch's own build has it: some libtorch classes change layout without it
# (at::RecordFunction holds a debug-only member before its inputs), so code compiled without it
# reads the wheel's objects at the wrong offsets (the emulated backend's host-sync observer reads
# RecordFunction::inputs()).
# No CUDA kernels (nvcc takes no host sanitizer flags), no benchmarks, and no Python front (an
# instrumented extension cannot load into an uninstrumented interpreter without LD_PRELOAD).
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DGRAPHCHECK_SANITIZE=address,undefined \
  -DGRAPHCHECK_CUDA=OFF -DGRAPHCHECK_BUILD_BENCHMARKS=OFF -DGRAPHCHECK_PYTHON_FRONT=OFF >/dev/null
cmake --build "$build" --parallel "$(cores)"

supp="$PWD/ci/sanitizer"
# The CLI sets exitcode=3 itself; the test executables get it here. A report halts the process.
export ASAN_OPTIONS="exitcode=3:detect_leaks=1:strict_string_checks=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="exitcode=3:halt_on_error=1:print_stacktrace=1:suppressions=$supp/ubsan.supp${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
args=(--test-dir "$build" --output-on-failure --parallel "$(cores)")
if [[ -n ${GRAPHCHECK_SANITIZE_TESTS:-} ]]; then args+=(-R "$GRAPHCHECK_SANITIZE_TESTS"); fi
exclude="${GRAPHCHECK_SANITIZE_EXCLUDE-every_scenario_in_exactly_one_shard|merged_shards_give|headless_chromium}"
if [[ -n $exclude ]]; then args+=(-E "$exclude"); fi
ctest "${args[@]}"
