# shellcheck shell=bash
# Sourced by the scripts that run the real attn-server on loopback
# (context_curve.sh, int8_quality.sh, overload.sh, soak.sh): a free port, the
# wait until a started server answers, and the held-out text they score.

# Prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_healthy ATTNCTL PORT PID LOG: waits up to a minute for the server
# (process PID, writing LOG) to answer health on PORT. If it exits or never
# answers, prints its log and fails.
wait_healthy() {
  local attnctl=$1 port=$2 pid=$3 log=$4
  for _ in $(seq 300); do
    "$attnctl" --server="127.0.0.1:$port" health > /dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "attn-server on port $port did not become healthy; its log:" >&2
  cat "$log" >&2
  return 1
}

# heldout_bible OUT: writes the last 4% of the King James Bible to OUT: the
# held-out part of the bundled models' training text
# (scripts/train_bundled_models.sh). Needs the bible-kjv package.
heldout_bible() {
  if ! command -v bible > /dev/null; then
    echo "needs the bible-kjv package (apt-get install bible-kjv)" >&2
    return 2
  fi
  local whole
  whole=$(mktemp)
  bible gen1:1-rev22:21 > "$whole"
  tail -c $(($(wc -c < "$whole") * 4 / 100)) "$whole" > "$1"
  rm -f "$whole"
}

# cut_windows TEXT COUNT CHARS PREFIX: writes COUNT windows of CHARS
# characters of TEXT to PREFIX0.txt, PREFIX1.txt, ..., starting evenly from
# its beginning to its end, so that they overlap when the text is short.
cut_windows() {
  local text=$1 count=$2 chars=$3 prefix=$4 size w
  size=$(wc -c < "$text")
  if [ "$size" -lt "$chars" ]; then
    echo "$text has $size characters; the windows need $chars" >&2
    return 2
  fi
  for ((w = 0; w < count; w++)); do
    dd if="$text" of="$prefix$w.txt" bs=64K iflag=skip_bytes,count_bytes status=none \
      skip=$((count > 1 ? w * (size - chars) / (count - 1) : 0)) count="$chars"
  done
}
