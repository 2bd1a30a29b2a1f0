#!/usr/bin/env bash
# Times a newcomer's first contact with crabbox, as the README has it:
#
#   1. a clean `git clone` of this repository (its committed HEAD) into a
#      temporary directory;
#   2. the README's first command,
#      `CGO_ENABLED=0 go run ./cmd/crabbox run -- sh -c 'pwd; ls'`,
#      with an EMPTY module cache and build cache (GOMODCACHE and GOCACHE
#      point at fresh temporary directories; GOPROXY, GONOSUMDB, GOFLAGS and
#      the rest stay as `go env` has them), wall-clock;
#   3. the README's install, `CGO_ENABLED=0 go install ./cmd/...` into a temporary GOBIN
#      with the same caches, wall-clock, counting with -x the packages it
#      compiles and the programs it links, and how many of those the first
#      command had built already (it should be none: the install may
#      compile what only the other commands use, such as provider
#      programs, but should not rebuild crabbox's packages).
#
#   bench/firstrun/run.sh
#   INSTALL_ENV='GOFLAGS=-trimpath' bench/firstrun/run.sh   # the install with extra env
#
# crabbox's state and config go to temporary directories too. Everything is
# removed on exit (the module cache with `go clean -modcache`, as its files
# are read-only). The load average and CPU are printed before and after: a
# busy machine stretches step 2 many times over.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/crabbox-firstrun-XXXXXX")
cleanup() {
	GOMODCACHE=$tmp/mod go clean -modcache 2>/dev/null || chmod -R u+w "$tmp" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s%N; }
secs() { awk -v ns="$1" 'BEGIN { printf "%.1f s", ns / 1e9 }'; }
load() { if [ -r /proc/loadavg ]; then cut -d' ' -f1-3 /proc/loadavg; else sysctl -n vm.loadavg 2>/dev/null || echo unknown; fi; }
cpu() {
	if [ -r /proc/cpuinfo ]; then
		sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | sort | uniq -c | sed 's/^ *\([0-9]*\) /\1 x /'
	else
		sysctl -n machdep.cpu.brand_string 2>/dev/null || echo unknown
	fi
}

echo "firstrun: $(go version), HEAD $(git -C "$root" rev-parse --short HEAD)"
echo "CPU: $(cpu | paste -sd';')"
echo "load average (1, 5, 15 min) before: $(load)"

start=$(now)
git clone -q "$root" "$tmp/src"
echo "git clone: $(secs $(($(now) - start)))"

export GOMODCACHE=$tmp/mod GOCACHE=$tmp/cache GOBIN=$tmp/bin
# Both of the README's commands build static binaries.
export CGO_ENABLED=0
export CRABBOX_STATE_DIR=$tmp/state CRABBOX_CONFIG=$tmp/no-config XDG_CACHE_HOME=$tmp/xdg-cache
mkdir -p "$GOMODCACHE" "$GOCACHE" "$GOBIN"
cd "$tmp/src"

echo
echo "\$ CGO_ENABLED=0 go run ./cmd/crabbox run -- sh -c 'pwd; ls'   (empty GOMODCACHE and GOCACHE)"
start=$(now)
go run ./cmd/crabbox run -- sh -c 'pwd; ls'
first=$(($(now) - start))
go list -deps ./cmd/crabbox | sort >"$tmp/deps.txt"
echo "first command: $(secs "$first") wall; it builds $(wc -l <"$tmp/deps.txt") packages ($(go list -deps -f '{{if not .Standard}}x{{end}}' ./cmd/crabbox | grep -c x) outside the standard library)"

# shellcheck disable=SC2086 # INSTALL_ENV is a list of NAME=VALUE words
echo
echo "\$ CGO_ENABLED=0 ${INSTALL_ENV:+$INSTALL_ENV }go install -x ./cmd/...   (same caches, GOBIN=\$tmp/bin)"
start=$(now)
env ${INSTALL_ENV:-} go install -x ./cmd/... 2>"$tmp/install.log"
install=$(($(now) - start))
# -x shows each compile with the package's import path after -p ("main"
# for commands) and each link.
sed -n 's|.*/compile -o .* -p \([^ ]*\) .*|\1|p' "$tmp/install.log" | sort >"$tmp/compiled.txt"
compiled=$(wc -l <"$tmp/compiled.txt")
again=$(comm -12 "$tmp/deps.txt" "$tmp/compiled.txt" | wc -l)
mains=$(grep -cx main "$tmp/compiled.txt" || true)
linked=$(grep -c '/link -o ' "$tmp/install.log" || true)
echo "install: $(secs "$install") wall; compiled $compiled packages ($mains of them commands' main packages), linked $linked programs: $(ls "$GOBIN" | paste -sd' ')"
echo "of the packages the first command built, compiled again: $again $(comm -12 "$tmp/deps.txt" "$tmp/compiled.txt" | head -20 | paste -sd' ')"
echo
echo "load average (1, 5, 15 min) after: $(load)"
