#!/usr/bin/env bash
# The pre-merge gate for model changes: builds (ci/build.sh), finds the files the change touches
# (`git diff --name-only BASE...HEAD`) and runs the scenarios they concern:
#   - a file under fixtures/<dir>/: every scenario whose model is a fixture registered in that
#     folder (GRAPHCHECK_REGISTER_MODEL("name", ...) in its .cpp files);
#   - a scenario file (scenarios/*.yaml): itself;
#   - harness/, kernels/, cmake/, a CMakeLists.txt at the root or in fixtures/: the whole suite;
#   - always the smoke set.
# `graphcheck run` runs them all; `graphcheck mutants` (the kill matrix) runs those of touched
# fixtures and changed scenario files (after a harness change, all), not the smoke set alone.
# Prints which scenarios it selected and why. Every step runs even when an earlier one failed; a
# one-line summary per step ends the output. Exits with the highest exit code of the steps (0: all
# passed; graphcheck's codes: 1 a check failed, 2 bad usage or input, 3 a crash).
#
#   bash ci/premerge.sh [BASE_REF]
#
#   GRAPHCHECK_BASE_REF     the git ref the change is compared with (default origin/main; the
#                           argument wins); it must be fetched, with the history down to the merge base
#   GRAPHCHECK_SMOKE        scenario files always run, separated by spaces (default
#                           scenarios/dsv4_mhc_refit.yaml scenarios/llama_checkpoint.yaml; empty: none)
#   GRAPHCHECK_REPORT_DIR   where every report goes (default reports/premerge): graphcheck.* and
#                           junit.xml (run), mutants.* and mutants-junit.xml (mutants), each step's
#                           console (*-console.log), selection.txt; scenario work files in work/
#                           (run) and mutants/work/ (mutants)
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

me=premerge
base="${1:-${GRAPHCHECK_BASE_REF:-origin/main}}"
read -ra smoke <<<"${GRAPHCHECK_SMOKE-scenarios/dsv4_mhc_refit.yaml scenarios/llama_checkpoint.yaml}"
dir="${GRAPHCHECK_REPORT_DIR:-reports/premerge}"
gc="${GRAPHCHECK:-${GRAPHCHECK_BUILD_DIR:-build}/bin/graphcheck}"
backend="${GRAPHCHECK_BACKEND:-auto}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# shellcheck source=ci/lib/steps.sh
source ci/lib/steps.sh

# ---- what the change touches ------------------------------------------------------------------
if ! git rev-parse --verify --quiet "$base^{commit}" >/dev/null; then
  say "base ref '$base' is not a commit here: fetch it (git fetch origin main) or pass another"
  exit 2
fi
if ! merge_base=$(git merge-base "$base" HEAD); then
  say "'$base' and HEAD share no history: fetch more of it (a shallow clone lacks the merge base)"
  exit 2
fi
mapfile -t changed < <(git diff --name-only "$base...HEAD")
say "${#changed[@]} files changed since $base (merge base ${merge_base:0:12})"

# The fixture of a scenario file: model: {fixture: NAME, ...} or a block mapping's fixture: NAME.
fixture_of() {
  sed -nE '/^([[:space:]]*|.*[{,][[:space:]]*)fixture:[[:space:]]*/{
    s/^([[:space:]]*|.*[{,][[:space:]]*)fixture:[[:space:]]*["'\'']?([A-Za-z0-9_.-]+).*/\2/p
    q
  }' "$1"
}
declare -A scenario_fixture=()
for f in scenarios/*.yaml; do scenario_fixture[$f]=$(fixture_of "$f"); done

declare -A why=() mutate=()
select_scenario() {  # select_scenario FILE REASON [mutate]
  why[$1]="${why[$1]:+${why[$1]}; }$2"
  if [[ ${3:-} == mutate ]]; then mutate[$1]=1; fi
}

whole=0
declare -A whole_why=()
declare -A fixture_dirs_done=()
others=0
for path in "${changed[@]}"; do
  case $path in
    harness/* | kernels/* | cmake/*)
      whole=$((whole + 1))
      whole_why[${path%%/*}/]=1 ;;
    CMakeLists.txt | fixtures/CMakeLists.txt)
      whole=$((whole + 1))
      whole_why[$path]=1 ;;
    fixtures/*/*)
      fdir=${path#fixtures/}
      fdir=${fdir%%/*}
      if [[ -n ${fixture_dirs_done[$fdir]:-} ]]; then continue; fi
      fixture_dirs_done[$fdir]=1
      mapfile -t names < <(grep -rhoE --include='*.cpp' 'GRAPHCHECK_REGISTER_MODEL\("[^"]+"' \
        "fixtures/$fdir" 2>/dev/null | sed -E 's/.*\("//; s/"$//' | sort -u)
      if ((${#names[@]} == 0)); then
        say "fixtures/$fdir/ changed but registers no fixture (now): no scenario for it"
        continue
      fi
      hits=0
      for f in "${!scenario_fixture[@]}"; do
        for name in "${names[@]}"; do
          if [[ ${scenario_fixture[$f]} == "$name" ]]; then
            select_scenario "$f" "fixture $name (fixtures/$fdir/ changed)" mutate
            hits=$((hits + 1))
          fi
        done
      done
      say "fixtures/$fdir/ changed: fixtures ${names[*]}: $hits scenarios" ;;
    scenarios/*.yaml)
      if [[ -f $path ]]; then
        select_scenario "$path" "scenario file changed" mutate
      else
        say "$path was deleted: nothing to run for it"
      fi ;;
    *) others=$((others + 1)) ;;
  esac
done
if ((others > 0)); then say "$others other changed files concern no scenario (docs, tests, CI, ...)"; fi
if ((whole > 0)); then
  mapfile -t roots < <(printf '%s\n' "${!whole_why[@]}" | sort)
  say "the whole suite: $whole changed files of the harness or the build (${roots[*]})"
  for f in "${!scenario_fixture[@]}"; do select_scenario "$f" "whole suite (${roots[*]} changed)" mutate; done
fi
smoke_missing=()
for f in "${smoke[@]}"; do
  if [[ -f $f ]]; then select_scenario "$f" "smoke set"; else smoke_missing+=("$f"); fi
done

selected=() mutated=()
if ((${#why[@]})); then mapfile -t selected < <(printf '%s\n' "${!why[@]}" | sort); fi
if ((${#mutate[@]})); then mapfile -t mutated < <(printf '%s\n' "${!mutate[@]}" | sort); fi

# ---- this change's reports only --------------------------------------------------------------
mkdir -p "$dir"
rm -rf -- "$dir/work" "$dir/mutants"
rm -f -- "$dir"/graphcheck.{json,md,html} "$dir/graphcheck-trace.json" "$dir/junit.xml" \
  "$dir"/mutants.{json,md,html} "$dir/mutants-trace.json" "$dir/mutants-junit.xml" \
  "$dir"/{run,mutants}-console.log "$dir/selection.txt"

{
  printf 'base %s (merge base %s), %d changed files\n' "$base" "$merge_base" "${#changed[@]}"
  for f in "${selected[@]}"; do
    what=run
    if [[ -n ${mutate[$f]:-} ]]; then what=run+mutants; fi
    printf '%-44s %-12s %s\n' "$f" "$what" "${why[$f]}"
  done
} >"$dir/selection.txt"
say "selected ${#selected[@]} scenarios (${#mutated[@]} for the kill matrix):"
tail -n +2 "$dir/selection.txt" | sed 's/^/  /'
if ((${#smoke_missing[@]})); then
  record select 2 "smoke scenarios not found: ${smoke_missing[*]} (GRAPHCHECK_SMOKE)"
fi

# ---- build ----------------------------------------------------------------------------------
build_step "$gc"

# ---- the selected scenarios and the kill matrix of the touched ones -------------------------
if ((${#selected[@]})); then
  step run "$gc" run "${selected[@]}" --backend "$backend" --report-dir "$dir"
else
  record run - "skipped: no scenario selected"
fi
if ((${#mutated[@]})); then
  step mutants "$gc" mutants "${mutated[@]}" --backend "$backend" --report-dir "$dir/mutants" \
    --json "$dir/mutants.json" --junit "$dir/mutants-junit.xml" --markdown "$dir/mutants.md" \
    --html "$dir/mutants.html" --trace "$dir/mutants-trace.json"
else
  record mutants - "skipped: no fixture or scenario file changed"
fi

# ---- summary -------------------------------------------------------------------------------
summarize

if [[ -n ${GITHUB_STEP_SUMMARY:-} ]]; then
  {
    printf '## ci/%s.sh: %s\n\n' "$me" "$verdict"
    printf '~~~\n'
    printf '%s\n' "${lines[@]}"
    printf '~~~\n\n<details><summary>%d scenarios selected against %s</summary>\n\n~~~\n' \
      "${#selected[@]}" "$base"
    tail -n +2 "$dir/selection.txt"
    printf '~~~\n\n</details>\n\n'
    for md in "$dir/graphcheck.md" "$dir/mutants.md"; do
      if [[ -f $md ]]; then cat -- "$md"; printf '\n'; fi
    done
  } >>"$GITHUB_STEP_SUMMARY"
fi
exit "$status"
