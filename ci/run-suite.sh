#!/usr/bin/env bash
# The main job: set up, build, and run the scenario suite on the default backend: the C++
# scenarios with the graphcheck binary (reports in reports/out/), then the Python front's
# scenarios (scenarios/python/) with `python -m graphcheck` (reports in reports/out/python/).
# Extra arguments go to both runs (e.g. --filter 'dsv4*'); exits with the higher exit code.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh
build="${GRAPHCHECK_BUILD_DIR:-build}"
rc=0
"$build/bin/graphcheck" run scenarios/ --report-dir reports/out "$@" || rc=$?
if [[ -d $build/python/graphcheck ]]; then
  py=$(sed -n 's/^GRAPHCHECK_PYTHON:FILEPATH=//p' "$build/CMakeCache.txt")
  prc=0
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" "$py" -m graphcheck run scenarios/python \
    --report-dir reports/out/python "$@" || prc=$?
  ((prc > rc)) && rc=$prc
else
  echo "ci/run-suite.sh: the Python front is not built (no Python headers for $build's torch): scenarios/python/ not run" >&2
  rc=$((rc > 2 ? rc : 2))
fi
exit "$rc"
