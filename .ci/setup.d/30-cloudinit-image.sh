#!/usr/bin/env bash
# The Docker image the cloud bootstrap test runs the rendered user data in
# (providers/internal/cloud, TestBootstrapInContainer): a minimal Debian
# root filesystem made with debootstrap, with openssh-server, sudo and the
# tools the bootstrap checks for, imported as
#
#   crabbox-test/cloudinit:latest
#
# No image is pulled. The root filesystem is cached as a tarball under
# /var/cache/crabbox-test, keyed by this script's recipe, so re-runs only
# re-import it (or do nothing when the image is current). Idempotent; run
# as root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

image=crabbox-test/cloudinit:latest
suite=${CRABBOX_CLOUDINIT_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")}
# The Debian archive: CRABBOX_CLOUDINIT_MIRROR or CRABBOX_MIRROR, else the one
# this machine's apt configuration installs the suite from (or, on Debian,
# its own release from), so a corporate mirror works. No host is named here.
. "$(dirname "$(realpath "$0")")/../lib/apt-mirror.sh"
mirror=${CRABBOX_CLOUDINIT_MIRROR:-${CRABBOX_MIRROR:-$(apt_mirror "$suite")}}
if [ -z "$mirror" ]; then
	echo "30-cloudinit-image: no Debian archive for $suite in the apt configuration; set CRABBOX_MIRROR=URL" >&2
	exit 1
fi
include=openssh-server,sudo,git,curl,ca-certificates,procps
recipe="v1 $suite $mirror $include"
key=$(printf '%s' "$recipe" | sha256sum | cut -c1-16)
cache=/var/cache/crabbox-test
tarball=$cache/cloudinit-$key.tar

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
	echo "30-cloudinit-image: no working docker; the bootstrap container test will fail in CI" >&2
	exit 1
fi
if [ "$(docker image inspect --format '{{index .Config.Labels "crabbox.recipe"}}' "$image" 2>/dev/null || true)" = "$key" ]; then
	echo "30-cloudinit-image: $image is current ($key)"
	exit 0
fi

if [ ! -s "$tarball" ]; then
	if ! command -v debootstrap >/dev/null; then
		apt-get -o DPkg::Lock::Timeout=300 update -qq
		apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap
	fi
	root=$(mktemp -d /var/tmp/crabbox-cloudinit.XXXXXX)
	trap 'rm -rf "$root"' EXIT
	debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror"
	# The bootstrap under test replaces host keys; none ship in the image.
	rm -f "$root"/etc/ssh/ssh_host_*
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
	mkdir -p "$cache"
	tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
fi

docker import \
	--change 'CMD ["/bin/sh"]' \
	--change "LABEL crabbox.recipe=$key" \
	"$tarball" "$image" >/dev/null
echo "30-cloudinit-image: imported $image ($key)"
