#!/usr/bin/env bash
# Set up, build, and run the harness's own tests (unit, end-to-end, interop) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
bash ci/build.sh
# One libtorch thread per test process: ctest runs one process per core, and threads that
# outnumber free cores make the small tensors of the tests several times slower.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec ctest --test-dir "${GRAPHCHECK_BUILD_DIR:-build}" --output-on-failure --parallel "$(cores)" "$@"
