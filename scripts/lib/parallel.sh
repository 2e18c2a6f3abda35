# shellcheck shell=bash
# The one way the project's scripts run independent pieces of work a few at
# a time and report them in a fixed order (the fuzzers in scripts/fuzz.sh,
# the files of scripts/check/check_thread_safety.sh).
#   run_parallel JOBS FUNC RESULT_DIR ITEM...
# Runs `FUNC INDEX ITEM` for each item, at most JOBS at once, in the
# background. FUNC writes its verdict to RESULT_DIR/INDEX.result, starting
# with "FAIL" when the item failed. Once all have ended, prints the results
# in the order of the items and returns 1 when any failed; a missing result
# counts as a failure (FUNC died before writing it).
run_parallel() {
  local jobs=$1 func=$2 dir=$3
  shift 3
  local items=("$@") i status=0
  for ((i = 0; i < ${#items[@]}; ++i)); do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    rm -f "$dir/$i.result"
    "$func" "$i" "${items[i]}" &
  done
  wait
  for ((i = 0; i < ${#items[@]}; ++i)); do
    if [ ! -f "$dir/$i.result" ]; then
      echo "FAIL ${items[i]}: no result (it ended before reporting)"
      status=1
      continue
    fi
    cat "$dir/$i.result"
    grep -q '^FAIL' "$dir/$i.result" && status=1
  done
  return $status
}
