# Shared by ci/nightly.sh and ci/premerge.sh (sourced, not run): steps that each record an exit
# code and a one-line note, a build step, and the summary. The caller sets `me` (its name) and
# `dir` (the report folder) before sourcing.

say() { printf '%s: %s\n' "$me" "$*"; }

steps=() codes=() notes=()
record() { steps+=("$1") codes+=("$2") notes+=("$3"); }

# step NAME COMMAND...: runs COMMAND, its console also in REPORT_DIR/NAME-console.log, and records
# its exit code; a failure does not stop the script, a signal (exit 128+N) skips the later steps.
stopped=""
step() {
  local name=$1 rc=0 t0=$SECONDS line=""
  shift
  if [[ -n $stopped ]]; then
    record "$name" - "not run: $stopped"
    return
  fi
  say "--- $name: $*"
  "$@" 2>&1 | tee "$dir/$name-console.log" || rc=$?
  case $name in
    run | python-run) line=$(grep -E '^[0-9]+ scenarios?: ' "$dir/$name-console.log" | tail -n1 || true) ;;
    mutants | python-mutants) line=$(grep -E '^[0-9]+ runs?, ' "$dir/$name-console.log" | tail -n1 | sed 's/; reports:.*//' || true) ;;
    compare) line=$(grep -E '^## graphcheck compare: ' "$dir/$name-console.log" | head -n1 | sed 's/^## //' || true) ;;
  esac
  # No summary line (a usage error, a crash of the CLI): the console's last line says why.
  [[ -n $line ]] || line="after $((SECONDS - t0)) s: $(grep -v '^[[:space:]]*$' "$dir/$name-console.log" | tail -n1 | cut -c1-160 || true)"
  record "$name" "$rc" "$line"
  if ((rc >= 128)); then stopped="$name was stopped by signal $((rc - 128))"; fi
}

# build_step GRAPHCHECK: ci/build.sh unless GRAPHCHECK_SKIP_BUILD=1; exits 2 when no binary is there.
build_step() {
  local gc=$1 t0=$SECONDS rc=0
  if [[ ${GRAPHCHECK_SKIP_BUILD:-0} != 1 ]]; then
    say "--- build: bash ci/build.sh"
    bash ci/build.sh || rc=$?
    record build "$rc" "ci/build.sh ($((SECONDS - t0)) s)"
    # Testing the graphcheck a failed build left behind would judge old code.
    if ((rc != 0)); then stopped="the build failed"; fi
  fi
  if [[ -z $stopped && ! -x $gc ]]; then
    say "$gc is not an executable graphcheck: build it (bash ci/build.sh) or point GRAPHCHECK to one"
    exit 2
  fi
}

# summarize: prints a line per step and the verdict; sets `status` (the highest exit code),
# `verdict` and `lines` for the caller's job summary.
summarize() {
  local i code failed=()
  status=0
  lines=()
  for i in "${!steps[@]}"; do
    code=${codes[$i]}
    if [[ $code == - ]]; then
      lines+=("$(printf '%-14s %s' "${steps[$i]}" "${notes[$i]}")")
      continue
    fi
    lines+=("$(printf '%-14s exit %-3s %s' "${steps[$i]}" "$code" "${notes[$i]}")")
    if ((code != 0)); then
      failed+=("${steps[$i]} (exit $code)")
      if ((code > status)); then status=$code; fi
    fi
  done
  for i in "${lines[@]}"; do say "$i"; done
  if ((status == 0)); then verdict="all steps passed; reports in $dir"; else verdict="FAILED: ${failed[*]}; reports in $dir"; fi
  say "$verdict"
}
