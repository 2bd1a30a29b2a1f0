#!/usr/bin/env bash
# Times the docker provider's loop against the docker CLI, alternating the
# two so that both see the same machine: a warm `crabbox run --id L -- true`
# against `docker exec CTR true`, and a one-shot `crabbox run -- true`
# against `docker run --rm IMG true` on the same image. Wall time of the
# whole process, as a user runs it. Prints each tool's median and range of
# N runs, and the ratio crabbox/docker: the ratio of the medians, and the
# median and range of the N pairwise ratios (each crabbox run against the
# docker run next to it). Goals (issue 37): warm ratio <= 1.0, one-shot
# ratio <= 1.5. The load average is printed before and after.
#
#   bench/dockerloop/run.sh [N]    (default 9; needs docker and busybox-static)
#
# The box image is busybox, imported from this machine's busybox (no image
# is pulled); the CLI is a static build of this checkout. One run of each
# command before the timed ones is not counted (it builds the docker
# provider's agent into the user's cache the first time, and warms the
# page cache). Any command that fails stops the benchmark.
set -euo pipefail
N=${1:-9}
IMG=crabbox-bench/busybox:latest
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

. "$root/bench/busybox-image.sh"
busybox_image "$IMG" "$work"
(cd "$root" && CGO_ENABLED=0 go build -o "$work/crabbox" ./cmd/crabbox)
cb=$work/crabbox
export CRABBOX_DOCKER_IMAGE=$IMG XDG_STATE_HOME=$work/state XDG_CONFIG_HOME=$work/config

# ms CMD...: runs CMD, prints its wall time in milliseconds; fails the
# benchmark (with CMD's stderr) when CMD fails.
ms() {
	local s e
	s=$(date +%s%N)
	if ! "$@" >/dev/null 2>"$work/err.log"; then
		echo "dockerloop: $* failed:" >&2
		cat "$work/err.log" >&2
		exit 1
	fi
	e=$(date +%s%N)
	echo $(((e - s) / 1000000))
}
# stats V...: median and range of integers.
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %4d ms, range %d-%d", a[int((NR+1)/2)], a[1], a[NR]}'; }
# ratios "A..." "B...": the ratio of the medians of A and B, and the
# median and range of the pairwise ratios A[i]/B[i].
ratios() {
	local a=($1) b=($2) r=() i
	for i in "${!a[@]}"; do r+=("$(awk -v x="${a[$i]}" -v y="${b[$i]}" 'BEGIN {printf "%.2f", x / y}')"); done
	local ma mb
	ma=$(printf '%s\n' "${a[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	mb=$(printf '%s\n' "${b[@]}" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	printf '%s\n' "${r[@]}" | sort -g | awk -v ma="$ma" -v mb="$mb" '{v[NR]=$1} END {printf "%.2fx (ratio of medians); pairwise median %.2fx, range %.2f-%.2fx", ma / mb, v[int((NR+1)/2)], v[1], v[NR]}'
}

cd "$work"
lease=$("$cb" warmup --provider docker --json | sed -n 's/.*"id": *"\(cbx_[0-9a-f]*\)".*/\1/p' | head -1)
[ -n "$lease" ] || { echo "dockerloop: warmup printed no lease ID" >&2; exit 1; }
trap '"$cb" stop "$lease" >/dev/null 2>&1; rm -rf "$work"' EXIT
ctr=$(docker ps -q --filter "label=lease=$lease")
[ -n "$ctr" ] || { echo "dockerloop: no container for lease $lease" >&2; exit 1; }

ms "$cb" run --provider docker --no-sync --id "$lease" -- true >/dev/null
ms docker exec "$ctr" true >/dev/null
ms "$cb" run --provider docker --no-sync -- true >/dev/null
ms docker run --rm "$IMG" true >/dev/null

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)   ($(nproc) CPUs, N=$N, $(docker version --format 'docker {{.Server.Version}}'))"
w=() e=() o=() r=()
for _ in $(seq "$N"); do
	w+=("$(ms "$cb" run --provider docker --no-sync --id "$lease" -- true)")
	e+=("$(ms docker exec "$ctr" true)")
done
for _ in $(seq "$N"); do
	o+=("$(ms "$cb" run --provider docker --no-sync -- true)")
	r+=("$(ms docker run --rm "$IMG" true)")
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "warm      crabbox run --id L -- true   $(stats "${w[@]}")"
echo "          docker exec CTR true         $(stats "${e[@]}")"
echo "          ratio                        $(ratios "${w[*]}" "${e[*]}")   goal <= 1.00x"
echo "one-shot  crabbox run -- true          $(stats "${o[@]}")"
echo "          docker run --rm IMG true     $(stats "${r[@]}")"
echo "          ratio                        $(ratios "${o[*]}" "${r[*]}")   goal <= 1.50x"
