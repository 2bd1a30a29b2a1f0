#!/usr/bin/env bash
# The docker provider's desktop box image the desktop tests use
# (providers/docker TestDesktop*, the root package's screenshot test, the
# portal's WebVNC browser test), built the way users build it:
#
#   crabbox image build --provider docker --desktop --tag crabbox-test/desktop:latest
#
# (a debootstrap of Debian from the apt configuration's archive, plus Xvfb,
# x11vnc, fonts and xterm). No image is pulled. It is built once and kept,
# keyed by its recipe (this script, the provider's image code, the suite
# and the archive): re-runs do nothing while the image is current. The
# tests that need it fail in CI (CI=true) without it. Idempotent; run as
# root.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/../.."
export DEBIAN_FRONTEND=noninteractive

image=crabbox-test/desktop:latest
suite=bookworm
. "$(dirname "$self")/../lib/apt-mirror.sh"
mirror=${CRABBOX_DESKTOP_MIRROR:-${CRABBOX_MIRROR:-$(apt_mirror "$suite")}}
if [ -z "$mirror" ]; then
	echo "50-desktop-image: no Debian archive for $suite in the apt configuration; set CRABBOX_MIRROR=URL" >&2
	exit 1
fi
recipe="v1 $suite $mirror $(cat "$self" providers/docker/image.go providers/docker/desktop.go | sha256sum | cut -c1-16)"
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
cache=/var/cache/crabbox-test
stamp=$cache/desktop-image.key

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
	echo "50-desktop-image: no working docker; the desktop tests will fail in CI" >&2
	exit 1
fi
have=$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
if [ -n "$have" ] && [ -s "$stamp" ] && [ "$(cat "$stamp")" = "$key $have" ]; then
	echo "50-desktop-image: $image is current ($key)"
	exit 0
fi
if ! command -v debootstrap >/dev/null; then
	apt-get -o DPkg::Lock::Timeout=300 update -qq
	apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap
fi
tmp=$(mktemp -d /var/tmp/crabbox-desktop.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/crabbox" ./cmd/crabbox
# Its own state and config: nothing of this machine's crabbox setup.
HOME=$tmp XDG_CONFIG_HOME=$tmp/config XDG_STATE_HOME=$tmp/state XDG_CACHE_HOME=$tmp/cache \
	"$tmp/crabbox" image build --provider docker --desktop --tag "$image" --suite "$suite" --mirror "$mirror" >"$tmp/build.log" 2>&1 || {
	tail -n 40 "$tmp/build.log" >&2
	exit 1
}
mkdir -p "$cache"
echo "$key $(docker image inspect --format '{{.Id}}' "$image")" >"$stamp"
echo "50-desktop-image: built $image ($key)"
