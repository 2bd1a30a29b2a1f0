#!/usr/bin/env bash
# Times a box started from a checkpoint against a fresh box set up by hand,
# from `crabbox warmup` to the end of the first command, alternating the
# two so that both see the same machine (issue 38):
#
#   fresh: warmup; run --id L -- sh setup.sh; run --id L -- true
#   from:  warmup --from CKP;                  run --id L -- true
#
# setup.sh stands for installing a toolchain and building: it writes 2,000
# files (about 40 MB) under deps/ and hashes them into build.out, with the
# box's own sh, dd and sha256sum. The checkpoint is made once, before the
# timed runs, from a box set up the same way. Wall time of the whole
# processes, as a user runs them. Prints each side's median and range of N
# runs and the ratio of the medians, and the load average before and after.
#
#   bench/checkpointbench/run.sh PROVIDER [N] [checkpoint create flags...]
#   bench/checkpointbench/run.sh local 5
#   bench/checkpointbench/run.sh docker 5
#   bench/checkpointbench/run.sh docker 5 --archive
#
# For docker the box image is busybox, imported from this machine's
# busybox-static (no image is pulled). The CLI is a static build of this
# checkout. Any command that fails stops the benchmark.
set -euo pipefail
PROVIDER=${1:?usage: run.sh PROVIDER [N] [checkpoint create flags...]}
N=${2:-5}
shift $(($# < 2 ? $# : 2))
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
cb=$work/crabbox
# Every lease warm made, one per line (warm runs in a subshell, $(...),
# so a variable would not reach cleanup).
touch "$work/leases"
cleanup() {
	while read -r l; do "$cb" stop "$l" >/dev/null 2>&1 || true; done <"$work/leases"
	"$cb" checkpoint delete warm >/dev/null 2>&1 || true
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
export CRABBOX_PROVIDER=$PROVIDER

mkdir "$work/repo"
cd "$work/repo"
cat > setup.sh <<'SETUP'
set -e
mkdir -p deps
i=0
while [ $i -lt 2000 ]; do
	dd if=/dev/urandom of=deps/f$i bs=20k count=1 2>/dev/null
	i=$((i + 1))
done
find deps -type f | sort | xargs sha256sum > build.out
SETUP
git init -q && git add setup.sh && git -c user.name=b -c user.email=b@example.com commit -qm setup

# warm: warmup [flags], prints the lease ID and remembers it for cleanup.
warm() {
	local id
	id=$("$cb" warmup --json "$@" | sed -n 's/.*"id": *"\(cbx_[0-9a-f]*\)".*/\1/p' | head -1)
	[ -n "$id" ] || { echo "checkpointbench: warmup $* printed no lease ID" >&2; exit 1; }
	echo "$id" >>"$work/leases"
	echo "$id"
}
quiet() { "$@" >/dev/null 2>"$work/err.log" || { echo "checkpointbench: $* failed:" >&2; cat "$work/err.log" >&2; exit 1; }; }
now() { date +%s%N; }

src=$(warm)
quiet "$cb" run --quiet --id "$src" -- sh setup.sh
quiet "$cb" checkpoint create "$src" --name warm "$@"
kind=$("$cb" checkpoint show warm --json | sed -n 's/.*"kind": *"\([a-z]*\)".*/\1/p' | head -1)
size=$("$cb" checkpoint show warm | awk '$1 == "size" {print $2, $3}')

fresh() {
	local s id
	s=$(now)
	id=$(warm)
	quiet "$cb" run --quiet --id "$id" -- sh setup.sh
	quiet "$cb" run --quiet --id "$id" -- true
	echo $((($(now) - s) / 1000000))
	quiet "$cb" stop "$id"
}
from() {
	local s id
	s=$(now)
	id=$(warm --from warm)
	quiet "$cb" run --quiet --id "$id" -- test -s build.out
	echo $((($(now) - s) / 1000000))
	quiet "$cb" stop "$id"
}
stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {printf "median %6d ms, range %d-%d", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

fresh >/dev/null # one of each before the timed runs (page cache, agent build)
from >/dev/null
echo "provider $PROVIDER, checkpoint kind $kind ($size), N=$N, $(nproc) CPUs"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
f=() c=()
for _ in $(seq "$N"); do
	f+=("$(fresh)")
	c+=("$(from)")
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo "fresh (warmup + setup + first command): $(stats "${f[@]}")"
echo "from  (warmup --from + first command):  $(stats "${c[@]}")"
awk -v a="$(median "${c[@]}")" -v b="$(median "${f[@]}")" 'BEGIN {printf "from/fresh: %.2fx (ratio of medians)\n", a / b}'
