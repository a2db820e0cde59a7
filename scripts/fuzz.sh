#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, HEADROOM_BUILD_FUZZERS=ON, in build/fuzz) and runs each for
# SECONDS (default 60) on a copy of its seed corpus in a temporary directory. Prints the executions
# per target; exits non-zero if any target found something (crash, sanitizer report, an exception
# other than InputError, a broken plan, a timeout or running out of memory). The inputs that did
# are kept in build/fuzz/findings/<target>/.
#
#   scripts/fuzz.sh [SECONDS]
#   FUZZ_TARGETS="trace_reader planner" scripts/fuzz.sh 600    # some targets only
#   FUZZ_MAX_LEN=8192 scripts/fuzz.sh 600                      # small inputs only: many more executions
#   FUZZ_FORK=2 scripts/fuzz.sh 600                            # two workers per target (-fork)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=${1:-60}
build=${FUZZ_BUILD_DIR:-$root/build/fuzz}
targets=${FUZZ_TARGETS:-"trace_reader plan_reader report_reader planner"}
max_len=${FUZZ_MAX_LEN:-524288}       # the committed traces are up to 400 KB; the planner's input adds 4 bytes
rss_limit_mb=${FUZZ_RSS_LIMIT_MB:-2048}
# One input. The slowest the planner target has met: a 512 KB trace of 1500 one-layer blocks under an
# infeasible budget, planned twice and simulated, about 17 s under ASan (0.5 s without).
timeout_s=${FUZZ_TIMEOUT:-30}
fork=${FUZZ_FORK:-0}

cxx=${CXX_FUZZ:-clang++}
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz.sh: $cxx not found (Debian packages clang libclang-rt-14-dev)" >&2
  exit 2
fi
if [[ ! -f $build/build.ninja ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHEADROOM_BUILD_FUZZERS=ON -DHEADROOM_WITH_GUI=OFF -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j "${FUZZ_BUILD_JOBS:-2}" --target headroom_fuzzers

work=$(mktemp -d "${TMPDIR:-/tmp}/headroom-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Seed corpora, copied: a run adds inputs to its corpus, never to the repository's seeds.
seed() {  # target, files...
  local dir=$work/corpus/$1
  shift
  mkdir -p "$dir"
  cp "$@" "$dir/"
}
seed trace_reader traces/*.json fuzz/seeds/trace/*.json
seed plan_reader tests/golden/*.json
seed report_reader fuzz/seeds/report/*.json
# The planner's input is 4 request bytes and a trace (fuzz/planner_fuzz.cpp): each trace with a few
# requests (budget fraction, batch, strategies/margin/optimizer).
mkdir -p "$work/corpus/planner"
cp fuzz/seeds/planner/* "$work/corpus/planner/"
for trace in fuzz/seeds/trace/*.json traces/*.json; do
  name=$(basename "$trace" .json)
  for request in '\x00\x10\x20\x0b' '\x00\x30\x08\x07' '\x00\x02\x3f\x0f' '\x80\x00\x10\x27' '\x00\x00\x05\x4b'; do
    { printf "$request"; cat "$trace"; } >"$work/corpus/planner/$name-${request//\\x/}"
  done
done

status=0
total=0
mkdir -p "$build/findings"
for target in $targets; do
  binary=$build/fuzz/headroom_fuzz_$target
  artifacts=$work/artifacts/$target
  mkdir -p "$artifacts"
  args=(-max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb="$rss_limit_mb" -timeout="$timeout_s"
        -dict=fuzz/headroom.dict -print_final_stats=1 -artifact_prefix="$artifacts/")
  [[ $fork -gt 0 ]] && args+=(-fork="$fork" -ignore_crashes=0 -ignore_timeouts=0 -ignore_ooms=0)
  log=$work/$target.log
  rc=0
  "$binary" "${args[@]}" "$work/corpus/$target" >"$log" 2>&1 || rc=$?
  # -fork reports its executions in its status lines, a single process in its final stats.
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  if [[ $execs -eq 0 ]]; then
    execs=$(grep -oE '#[0-9]+' "$log" | tail -1 | tr -d '#')
    execs=${execs:-0}
  fi
  total=$((total + execs))
  found=$(find "$artifacts" -type f | wc -l)
  if [[ $rc -ne 0 || $found -gt 0 ]]; then
    status=1
    mkdir -p "$build/findings/$target"
    [[ $found -gt 0 ]] && cp "$artifacts"/* "$build/findings/$target/"
    cp "$log" "$build/findings/$target/fuzz.log"
    printf 'fuzz %-14s %12s executions  FINDING (exit %d, %d input(s) in %s)\n' "$target" "$execs" "$rc" "$found" \
      "$build/findings/$target"
    grep -m1 -E 'ERROR: |headroom fuzz finding|runtime error' "$log" | sed 's/^/    /' || true
  else
    printf 'fuzz %-14s %12s executions  clean (%ss)\n' "$target" "$execs" "$seconds"
  fi
done
printf 'fuzz total          %12s executions\n' "$total"
exit $status
