#!/usr/bin/env bash
# An outside model author's path, end to end: installs the build in ${GRAPHCHECK_BUILD_DIR:-build}
# to a temporary prefix, moves the prefix (the package must be relocatable), builds
# examples/external_model against it with find_package(graphcheck), then runs its scenario
#   - through the stock CLI with --plugin: clean (exit 0) and with its planted bug (exit 1, caught),
#   - through its own binary, which links the whole CLI (graphcheck::cli): run and the kill matrix,
#   - and its GoogleTest binary (graphcheck::gtest), from the project's directory.
# The example is copied out of the repository first, as an author's own project would be.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=ci/lib/cores.sh
source ci/lib/cores.sh
build="${GRAPHCHECK_BUILD_DIR:-build}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/staging" >/dev/null
mv "$tmp/staging" "$tmp/prefix"
prefix="$tmp/prefix"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# The example as an author has it: a project of its own, outside this repository.
cp -r examples/external_model "$tmp/src"
cmake -S "$tmp/src" -B "$tmp/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/example" --parallel "$(cores)"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
scenarios="$tmp/src/scenarios"
plugin="$tmp/example/libexternal_models.so"

expect() {  # expect RC NEEDLE COMMAND...: runs COMMAND, checks its exit code and output
  local want=$1 needle=$2 rc=0
  shift 2
  "$@" >"$tmp/out.txt" 2>&1 || rc=$?
  if [[ $rc != "$want" ]] || ! grep -qF -- "$needle" "$tmp/out.txt"; then
    cat "$tmp/out.txt"
    echo "ci/external-example.sh: '$*' exited $rc (expected $want) or its output lacks '$needle'" >&2
    exit 1
  fi
  echo "ci/external-example.sh: ok (exit $rc): $*"
}
expect 0 "1 passed, 0 failed" "$prefix/bin/graphcheck" run "$scenarios" --plugin "$plugin" --report-dir "$tmp/r1"
expect 1 "mutation external_gated_mlp.fold_once on external-gated-mlp: caught by replay_diff" \
  "$prefix/bin/graphcheck" run "$scenarios" --plugin "$plugin" --mutation external_gated_mlp.fold_once \
  --report-dir "$tmp/r2"
expect 0 "1 passed, 0 failed" "$tmp/example/external_graphcheck" run "$scenarios" --report-dir "$tmp/r3"
expect 0 "2 runs, 0 problems" "$tmp/example/external_graphcheck" mutants "$scenarios" --report-dir "$tmp/r4"
expect 0 "[  PASSED  ] 4 tests." bash -c "cd '$tmp/src' && '$tmp/example/model_tests'"
