#!/usr/bin/env bash
# Times a one-shot run whose box comes from a ready pool against one that
# makes its box, alternating the two so that both see the same machine
# (issue 39). Wall time of the whole `crabbox run -- true` process, as a
# user runs it: acquire (or take), sync, the first command, release.
#
#   pool:  crabbox run --pool bench -- true     (then, untimed, pool ensure)
#   fresh: crabbox run --provider P -- true
#
# The pool is refilled between runs, untimed, with `crabbox pool ensure`
# (CRABBOX_POOL_REFILL=0 turns off run's own background refill, which
# would otherwise run during the next timed run). Prints each side's
# median and range of N runs, the ratio of the medians, and the load
# average before and after.
#
#   bench/poolbench/run.sh PROVIDER [N] [provider flags...]
#   bench/poolbench/run.sh docker 9
#   bench/poolbench/run.sh local 9
#
# For docker the box image is busybox, imported from this machine's
# busybox-static (no image is pulled). The CLI is a static build of this
# checkout. Any command that fails stops the benchmark.
set -euo pipefail
PROVIDER=${1:?usage: run.sh PROVIDER [N] [provider flags...]}
N=${2:-9}
shift $(($# < 2 ? $# : 2))
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cb=$work/crabbox
cleanup() {
	"$cb" pool drain bench >/dev/null 2>&1 || true
	"$cb" cleanup >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

if [ "$PROVIDER" = docker ]; then
	IMG=crabbox-bench/busybox:latest
	. "$root/bench/busybox-image.sh"
	busybox_image "$IMG" "$work"
	export CRABBOX_DOCKER_IMAGE=$IMG
fi
(cd "$root" && CGO_ENABLED=0 go build -o "$cb" ./cmd/crabbox)
export CRABBOX_STATE_DIR=$work/state CRABBOX_CONFIG=$work/none XDG_CONFIG_HOME=$work/config
export CRABBOX_POOL_REFILL=0

mkdir "$work/repo"
cd "$work/repo"
echo hello >README
git init -q && git add README && git -c user.name=b -c user.email=b@example.com commit -qm init

quiet() { "$@" >/dev/null 2>"$work/err.log" || { echo "poolbench: $* failed:" >&2; cat "$work/err.log" >&2; exit 1; }; }
now() { date +%s%N; }

quiet "$cb" pool ensure --provider "$PROVIDER" "$@" --size 1 --pool bench

fresh() {
	local s
	s=$(now)
	quiet "$cb" run --provider "$PROVIDER" "$@" --quiet -- true
	echo $((($(now) - s) / 1000000))
}
pooled() {
	local s
	s=$(now)
	quiet "$cb" run --pool bench --quiet -- true
	echo $((($(now) - s) / 1000000))
	quiet "$cb" pool ensure --pool bench
}
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %6d ms, range %d-%d", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

fresh "$@" >/dev/null # one of each before the timed runs (page cache)
pooled >/dev/null
echo "provider $PROVIDER, N=$N, $(nproc) CPUs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
f=() p=()
for _ in $(seq "$N"); do
	f+=("$(fresh "$@")")
	p+=("$(pooled)")
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "fresh (run --provider $PROVIDER -- true): $(stats "${f[@]}")"
echo "pool  (run --pool bench -- true):        $(stats "${p[@]}")"
awk -v a="$(median "${p[@]}")" -v b="$(median "${f[@]}")" 'BEGIN {printf "pool/fresh: %.2fx (ratio of medians)\n", a / b}'
