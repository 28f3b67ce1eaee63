#!/usr/bin/env bash
# The nightly job (GPU or CPU runner): builds (ci/build.sh), runs the whole scenario suite
# (`graphcheck run scenarios/ --slow`: the slow scale scenarios too) and the kill matrix (`graphcheck mutants scenarios/`), the same
# for the Python front (`python -m graphcheck run scenarios/python --slow`, `... mutants scenarios/python`; reports in
# REPORT_DIR/python and REPORT_DIR/python-mutants), and, given
# the previous night's graphcheck.json, compares tonight's against it (`graphcheck compare`: new
# failures, time and memory regressions). Every step runs even when an earlier one failed; a
# one-line summary per step ends the output. Exits with the highest exit code of the steps (0: all
# passed; graphcheck's codes: 1 a check failed or a regression, 2 bad usage or input, 3 a crash).
#
#   bash ci/nightly.sh [BASELINE.json]
#
#   GRAPHCHECK_BASELINE     the previous night's graphcheck.json (the argument wins); no compare
#                           without one. It is copied to REPORT_DIR/baseline.json first, so it may
#                           lie in REPORT_DIR itself
#   GRAPHCHECK_REPORT_DIR   where every report goes (default reports/nightly): graphcheck.* and
#                           junit.xml (run), mutants.* and mutants-junit.xml (mutants), compare.md,
#                           each step's console (*-console.log). Scenario work files (checkpoints,
#                           logs) go to work/ for run and mutants/work/ for mutants: both name them
#                           run-<row>.log, so in one folder mutants would overwrite run's
#   GRAPHCHECK_COMPARE_ARGS more options for compare, split at spaces, e.g. "--max-regression 50
#                           --min-seconds 0.05" where a shared runner's timings are noisy
#   GRAPHCHECK_BACKEND      --backend for run and mutants: auto (default), emulated or cuda
#   GRAPHCHECK              the graphcheck binary (default ${GRAPHCHECK_BUILD_DIR:-build}/bin/graphcheck)
#   GRAPHCHECK_SKIP_BUILD   1: do not run ci/build.sh (e.g. with GRAPHCHECK= a binary built elsewhere)
#   GRAPHCHECK_PLUGIN_PATH  ':'-separated model plugin libraries (out-of-tree fixtures whose
#                           scenarios are in scenarios/); graphcheck reads it itself, as --plugin
#   GITHUB_STEP_SUMMARY     when set, the step lines and the Markdown reports are appended to it
#
# Relative paths are taken from the repository root. OMP_NUM_THREADS defaults to 1.
set -euo pipefail
cd "$(dirname "$0")/.."

me=nightly
dir="${GRAPHCHECK_REPORT_DIR:-reports/nightly}"
gc="${GRAPHCHECK:-${GRAPHCHECK_BUILD_DIR:-build}/bin/graphcheck}"
backend="${GRAPHCHECK_BACKEND:-auto}"
baseline="${1:-${GRAPHCHECK_BASELINE:-}}"
read -ra compare_args <<<"${GRAPHCHECK_COMPARE_ARGS:-}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# shellcheck source=ci/lib/steps.sh
source ci/lib/steps.sh

# ---- build ----------------------------------------------------------------------------------
build_step "$gc"

# ---- tonight's reports only -----------------------------------------------------------------
mkdir -p "$dir"
saved=""
if [[ -n $baseline && -f $baseline ]]; then
  saved=$(mktemp)
  cp -- "$baseline" "$saved"
fi
rm -rf -- "$dir/work" "$dir/mutants" "$dir/python" "$dir/python-mutants"
rm -f -- "$dir"/graphcheck.{json,md,html} "$dir/graphcheck-trace.json" "$dir/junit.xml" \
  "$dir"/mutants.{json,md,html} "$dir/mutants-trace.json" "$dir/mutants-junit.xml" \
  "$dir/compare.md" "$dir/baseline.json" "$dir"/{run,mutants,python-run,python-mutants,compare}-console.log
if [[ -n $saved ]]; then mv -- "$saved" "$dir/baseline.json"; fi

# ---- the suite and the kill matrix ----------------------------------------------------------
# The run includes the slow scale scenarios (slow: true); the kill matrix leaves them out (they
# declare no mutation, and their clean run is the run's).
step run "$gc" run scenarios/ --slow --backend "$backend" --report-dir "$dir"
step mutants "$gc" mutants scenarios/ --backend "$backend" --report-dir "$dir/mutants" \
  --json "$dir/mutants.json" --junit "$dir/mutants-junit.xml" --markdown "$dir/mutants.md" \
  --html "$dir/mutants.html" --trace "$dir/mutants-trace.json"

# ---- the Python front ----------------------------------------------------------------------
# scenarios/python/ through `python -m graphcheck` (its slow scale scenario too) and their kill
# matrix, with the interpreter the build found (GRAPHCHECK_PYTHON in the CMake cache). Without a
# Python front in the build tree: an error, unless the binary was built elsewhere (then not run).
build_dir="${GRAPHCHECK_BUILD_DIR:-build}"
py=$(sed -n 's/^GRAPHCHECK_PYTHON:FILEPATH=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
if [[ -d $build_dir/python/graphcheck && -n $py ]]; then
  export PYTHONPATH="$build_dir/python${PYTHONPATH:+:$PYTHONPATH}"
  step python-run "$py" -m graphcheck run scenarios/python --slow --backend "$backend" --report-dir "$dir/python"
  step python-mutants "$py" -m graphcheck mutants scenarios/python --backend "$backend" \
    --report-dir "$dir/python-mutants"
elif [[ ${GRAPHCHECK_SKIP_BUILD:-0} == 1 ]]; then
  record python - "not run: no Python front in $build_dir (GRAPHCHECK_SKIP_BUILD=1, a binary built elsewhere)"
else
  record python 2 "the Python front is not built in $build_dir (no Python headers for its torch): scenarios/python/ not run"
fi

# ---- regressions against the previous night -------------------------------------------------
if [[ -z $baseline ]]; then
  record compare - "skipped: no baseline (GRAPHCHECK_BASELINE or the first argument)"
elif [[ -z $saved ]]; then
  record compare 2 "no baseline at '$baseline' (GRAPHCHECK_BASELINE or the first argument)"
else
  step compare "$gc" compare "$dir/baseline.json" "$dir/graphcheck.json" --markdown "$dir/compare.md" \
    "${compare_args[@]}"
fi

# ---- summary -------------------------------------------------------------------------------
summarize

if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
  {
    printf '## ci/%s.sh: %s\n\n' "$me" "$verdict"
    printf '~~~\n'
    printf '%s\n' "${lines[@]}"
    printf '~~~\n\n'
    for md in "$dir/graphcheck.md" "$dir/mutants.md" "$dir/compare.md"; do
      if [[ -f $md ]]; then cat -- "$md"; printf '\n'; fi
    done
  } >>"$GITHUB_STEP_SUMMARY"
fi
exit "$status"
