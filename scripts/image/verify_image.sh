#!/usr/bin/env bash
# Builds the CPU image with podman (no Docker engine needed) and checks it:
# its size (under MAX_MB, default 500), its contents (no shell, no setuid or
# setgid file, a non-root user without a login shell), then starts a
# container and checks it from the host: attnctl health, the model list, a
# streamed completion with each backend's first model, the HTTP API and the metrics. Then
# stops the container with SIGTERM and checks it exits 0. The steps follow what works on a Debian 12 host without a
# registry: a bookworm base image made with debootstrap, `podman build
# --isolation chroot`, and runc as the runtime.
#   IMAGE      image name (default attn-server:verify)
#   KEEP=1     keep the image and base image afterwards
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-attn-server:verify}
MAX_MB=${MAX_MB:-500}
BASE=docker.io/library/debian:bookworm-slim
ATTNCTL=${ATTNCTL:-build/client/attnctl}

if ! command -v podman > /dev/null || ! command -v debootstrap > /dev/null; then
  echo "== installing podman, buildah, debootstrap, uidmap, runc"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    podman buildah debootstrap uidmap runc > /dev/null
fi
ls models/*.pt > /dev/null || { echo "no models/*.pt to put in the image" >&2; exit 1; }
[ -x "$ATTNCTL" ] || { echo "build attnctl first (bash scripts/test.sh or cmake --build build)" >&2; exit 1; }

if ! podman image exists "$BASE"; then
  echo "== base image: debootstrap bookworm (minbase) -> $BASE"
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" > /dev/null
  tar -C "$rootfs" -c . | podman import - "$BASE" > /dev/null
  rm -rf "$rootfs"
fi

echo "== podman build --format docker -t $IMAGE ."  # docker format keeps HEALTHCHECK
start=$(date +%s)
podman build --isolation chroot --format docker -t "$IMAGE" . > /tmp/attn-image-build.log 2>&1 \
  || { tail -30 /tmp/attn-image-build.log; exit 1; }
echo "   built in $(( $(date +%s) - start )) s; $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"

size_mb=$(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%d", $1/1e6}')
[ "$size_mb" -le "$MAX_MB" ] || { echo "FAIL: the image is $size_mb MB, over $MAX_MB MB" >&2; exit 1; }

echo "== contents"
box=$(podman create "$IMAGE")
listing=$(mktemp)
podman export "$box" | tar -tvf - > "$listing"
passwd=$(podman export "$box" | tar -xOf - --wildcards '*etc/passwd')
podman rm "$box" > /dev/null
echo "   $(wc -l < "$listing") entries"
# Mode strings with s or S in the user or group execute place.
if awk '$1 ~ /^.{3}[sS]|^.{6}[sS]/' "$listing" | grep .; then
  echo "FAIL: setuid or setgid files (above)" >&2; exit 1
fi
echo "   no setuid or setgid file"
if grep -E ' (\./)?(usr/)?s?bin/(sh|bash|dash|ash|zsh|busybox|su|sudo|apt|apt-get|dpkg)( |$)' "$listing"; then
  echo "FAIL: a shell or a package tool is in the image (above)" >&2; exit 1
fi
echo "   no shell, no package manager"
user=$(podman image inspect "$IMAGE" --format '{{.Config.User}}')
[ "${user%%:*}" = 10001 ] || { echo "FAIL: the image runs as '$user', not 10001" >&2; exit 1; }
login_shell=$(echo "$passwd" | awk -F: '$3 == 10001 {print $7}')
[ "$login_shell" = /usr/sbin/nologin ] && ! grep -qE " (\./)?${login_shell#/}( |\$)" "$listing" \
  || { echo "FAIL: user 10001 has login shell '$login_shell'" >&2; exit 1; }
echo "   runs as $user, whose login shell ($login_shell) does not exist in the image"
rm -f "$listing"

echo "== starting the container"
name=attn-verify-$$
podman --runtime runc run -d --name "$name" --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \
  -p 127.0.0.1:58051:50051 -p 127.0.0.1:58000:8000 -p 127.0.0.1:59090:9090 "$IMAGE" > /dev/null
cleanup() { podman --runtime runc rm -f "$name" > /dev/null 2>&1 || true; }
trap cleanup EXIT
ctl=("$ATTNCTL" --server=127.0.0.1:58051)
for _ in $(seq 120); do
  "${ctl[@]}" health > /dev/null 2>&1 && break
  sleep 1
done
echo "== attnctl health";  "${ctl[@]}" health
echo "== attnctl models";  "${ctl[@]}" models
echo "== attnctl stream";  "${ctl[@]}" stream --prompt="And it came to pass" --max_tokens=40 --temperature=0
echo "== HTTP API";        curl -sf http://127.0.0.1:58000/health && echo
curl -sf http://127.0.0.1:58000/v1/completions -d '{"prompt": "And it came to pass", "max_tokens": 20}'
echo
echo "== metrics";         curl -sf http://127.0.0.1:59090/metrics | grep -E '^attn_(generation_tokens_total|requests_total)' | head -5
echo "== HEALTHCHECK"
podman image inspect "$IMAGE" --format '{{json .Config.Healthcheck}}'
# The HEALTHCHECK's command, run inside the container as the engine would.
podman --runtime runc exec "$name" attnctl --server=127.0.0.1:50051 --timeout_s=4 health
echo "== SIGTERM"
podman --runtime runc stop -t 40 "$name" > /dev/null
echo "exit code $(podman --runtime runc inspect "$name" --format '{{.State.ExitCode}}')"
podman --runtime runc logs "$name" 2>&1 | tail -4
if [ "${KEEP:-0}" != 1 ]; then podman rmi -f "$IMAGE" > /dev/null 2>&1 || true; fi
echo "image verified"
