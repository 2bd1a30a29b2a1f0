#!/usr/bin/env bash
# Times the docker provider's loop against the docker CLI, alternating the
# two: a warm `crabbox run --id L -- true` against `docker exec CTR true`,
# and a one-shot `crabbox run -- true` against `docker run --rm IMG true`.
# Wall time of the whole process, as a user runs it; prints the median and
# range of N runs of each, and the load average before and after.
#
#   bench/dockerloop/run.sh [N]    (default 9; needs docker and busybox-static)
#
# The box image is busybox, imported from this machine's /bin/busybox
# (no image is pulled); the CLI is a static build of this checkout.
set -euo pipefail
N=${1:-9}
IMG=crabbox-bench/busybox:latest
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! docker image inspect "$IMG" >/dev/null 2>&1; then
	busybox=$(command -v busybox) || { echo "dockerloop: install busybox-static" >&2; exit 1; }
	mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp"
	cp "$busybox" "$work/rootfs/bin/busybox"
	"$busybox" --install -s "$work/rootfs/bin" 2>/dev/null || (cd "$work/rootfs/bin" && for a in $("$busybox" --list); do ln -sf busybox "$a"; done)
	tar -C "$work/rootfs" -c . | docker import - "$IMG" >/dev/null
fi
(cd "$root" && CGO_ENABLED=0 go build -o "$work/crabbox" ./cmd/crabbox)
cb=$work/crabbox
export CRABBOX_DOCKER_IMAGE=$IMG XDG_STATE_HOME=$work/state XDG_CONFIG_HOME=$work/config

ms() {
	local s
	s=$(date +%s%N)
	"$@" >/dev/null 2>>"$work/err.log"
	echo $((($(date +%s%N) - s) / 1000000))
}
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %d ms, range %d-%d", a[int((NR+1)/2)], a[1], a[NR]}'; }

cd "$work"
lease=$("$cb" warmup --provider docker --json | sed -n 's/.*"id": *"\(cbx_[0-9a-f]*\)".*/\1/p' | head -1)
trap '"$cb" stop "$lease" >/dev/null 2>&1; rm -rf "$work"' EXIT
ctr=$(docker ps -q --filter "label=lease=$lease")
[ -n "$ctr" ] || { echo "dockerloop: no container for lease $lease" >&2; exit 1; }

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
w=() e=() o=() r=()
for _ in $(seq "$N"); do
	w+=("$(ms "$cb" run --provider docker --no-sync --id "$lease" -- true)")
	e+=("$(ms docker exec "$ctr" true)")
done
for _ in $(seq "$N"); do
	o+=("$(ms "$cb" run --provider docker --no-sync -- true)")
	r+=("$(ms docker run --rm "$IMG" true)")
done
echo "warm    crabbox run --id L -- true   $(med "${w[@]}")"
echo "        docker exec CTR true         $(med "${e[@]}")"
echo "one-off crabbox run -- true          $(med "${o[@]}")"
echo "        docker run --rm IMG true     $(med "${r[@]}")"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
