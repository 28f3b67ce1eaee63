#!/usr/bin/env bash
# The dsv4 growth curve as the CLI runs it: for each size (layers x hidden), the wall time and the
# peak RSS of `graphcheck run` (in one process where it has --no-isolate) on one scenario (initial
# checkpoint, batch sizes 1 and 4, two refits) with every probe and with none, and the model's own
# bytes for the ratio. Any graphcheck binary will do, so that two builds (say, two commits) can be
# compared on one machine in one sitting: --graphcheck PATH.
#
#   bench/growth.sh [--graphcheck PATH] [--out FILE] [SIZE ...]   (default 8x1024 16x1024 32x1024 64x512)
#
#   --graphcheck PATH   the binary to measure (default $GRAPHCHECK_BUILD_DIR/bin/graphcheck, build/)
#   --out FILE          also write the rows as TSV: size checks seconds peak_rss_mb model_mb
#
# One libtorch thread (as CI runs). The model's bytes are the dsv4 fixture's float32 parameters:
# 4 bytes x layers x (hidden^2 + hc_mult x hidden + hidden + experts x (hidden + 3 x intermediate
# x hidden)), the same figure as lifecycle_bench's live bytes (538 MB at 32x1024).
set -euo pipefail
# Paths given on the command line are the caller's; the default binary is the checkout's.
root=$(cd "$(dirname "$0")/.." && pwd)
script="$root/bench/$(basename "$0")"

bin=""
out=""
sizes=()
while (($#)); do
  case $1 in
    --graphcheck) bin=$(realpath -m -- "${2:?--graphcheck needs a path}"); shift 2 ;;
    --out) out=$(realpath -m -- "${2:?--out needs a file}"); shift 2 ;;
    -h|--help) sed -n '2,15p' "$script" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "bench/growth.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      if [[ ! $1 =~ ^[0-9]+x[0-9]+$ ]]; then
        echo "bench/growth.sh: size '$1' is not LAYERSxHIDDEN (e.g. 32x1024)" >&2; exit 2
      fi
      sizes+=("$1"); shift ;;
  esac
done
((${#sizes[@]})) || sizes=(8x1024 16x1024 32x1024 64x512)
if [[ -z $bin ]]; then
  build="${GRAPHCHECK_BUILD_DIR:-build}"
  [[ $build == /* ]] || build="$root/$build"
  bin="$build/bin/graphcheck"
fi
if [[ ! -x $bin ]]; then
  echo "bench/growth.sh: no graphcheck binary at '$bin': build it (ci/build.sh) or pass --graphcheck PATH" >&2
  exit 2
fi
if [[ ! -x /usr/bin/time ]]; then
  echo "bench/growth.sh: needs GNU time at /usr/bin/time for the peak RSS (apt-get install time)" >&2
  exit 2
fi

# In this process where the binary can (--no-isolate); older ones always did.
isolate=()
help=$("$bin" run --help 2>/dev/null || true)
if [[ $help == *--no-isolate* ]]; then isolate=(--no-isolate); fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
if [[ -n $out ]]; then printf 'size\tchecks\tseconds\tpeak_rss_mb\tmodel_mb\n' >"$out"; fi
printf '%-9s %-6s %9s %13s %9s %10s\n' size checks seconds "peak RSS MB" "model MB" "RSS/model"
for size in "${sizes[@]}"; do
  layers=${size%x*} hidden=${size#*x}
  model_mb=$(awk -v l="$layers" -v h="$hidden" 'BEGIN { printf "%.1f", 4 * l * (h*h + 4*h + h + 4*(h + 3*256*h)) / 1e6 }')
  for checks in all none; do
    list=all
    [[ $checks == none ]] && list='[]'
    cat >"$work/growth.yaml" <<EOF
scenario: growth-$size-$checks
model: {fixture: dsv4, config: {layers: $layers, hidden: $hidden, hc_mult: 4, experts: 4, intermediate: 256}}
load: checkpoint
seed: 21
capture: {batch_sizes: [1, 4]}
cycles:
  - refit: {seed: 22}
  - refit: {seed: 23}
checks: $list
EOF
    if ! /usr/bin/time -f '%e %M' -o "$work/time" "$bin" run ${isolate[@]+"${isolate[@]}"} --report-dir "$work/reports" \
        "$work/growth.yaml" >"$work/log" 2>&1; then
      echo "bench/growth.sh: $size ($checks) did not pass; its output:" >&2
      cat "$work/log" >&2
      exit 1
    fi
    read -r seconds rss_kb <"$work/time"
    rss_mb=$(awk -v k="$rss_kb" 'BEGIN { printf "%.0f", k * 1024 / 1e6 }')
    ratio=$(awk -v r="$rss_mb" -v m="$model_mb" 'BEGIN { printf "%.1f", r / m }')
    printf '%-9s %-6s %9s %13s %9s %10s\n' "$size" "$checks" "$seconds" "$rss_mb" "$model_mb" "$ratio"
    if [[ -n $out ]]; then
      printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$checks" "$seconds" "$rss_mb" "$model_mb" >>"$out"
    fi
  done
done
