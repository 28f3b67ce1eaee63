#!/usr/bin/env bash
# The main job: set up, build, and run the scenario suite on the default backend.
# Reports (console, reports/out/graphcheck.json, reports/out/junit.xml). Extra arguments go to
# `graphcheck run` (e.g. --mutation mhc.rebind_broadcast, --filter 'dsv4*').
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh
exec "${GRAPHCHECK_BUILD_DIR:-build}/bin/graphcheck" run scenarios/ --report-dir reports/out "$@"
