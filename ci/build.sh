#!/usr/bin/env bash
# Sets up (ci/setup.sh), configures and builds graphcheck into ${GRAPHCHECK_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
bash ci/setup.sh
# Release by default: without debug info a libtorch translation unit compiles in ~60% of the time
# (GRAPHCHECK_BUILD_TYPE=RelWithDebInfo for a debuggable build).
build_dir="${GRAPHCHECK_BUILD_DIR:-build}"
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
# -O2, not CMake's -O3 for Release: the libtorch templates compile faster and the tests run as
# fast (the survivor scans get their -O3 per file). GRAPHCHECK_CMAKE_ARGS: extra cmake arguments
# (.ci/run leaves the benchmarks to the CUDA tree, which builds every target).
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${GRAPHCHECK_BUILD_TYPE:-Release}" \
  -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" ${GRAPHCHECK_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" --parallel "$(cores)"
