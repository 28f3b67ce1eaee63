#!/usr/bin/env bash
# Set up, build, and run the harness's own tests (unit, end-to-end, interop) with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh
exec ctest --test-dir "${GRAPHCHECK_BUILD_DIR:-build}" --output-on-failure --parallel "$(nproc)" "$@"
