#!/usr/bin/env bash
# Sets up (ci/setup.sh), configures and builds graphcheck into ${GRAPHCHECK_BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# Release by default: without debug info a libtorch translation unit compiles in ~60% of the time
# (GRAPHCHECK_BUILD_TYPE=RelWithDebInfo for a debuggable build).
build_dir="${GRAPHCHECK_BUILD_DIR:-build}"
generator=()
if [[ ! -f $build_dir/CMakeCache.txt ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${GRAPHCHECK_BUILD_TYPE:-Release}" >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
