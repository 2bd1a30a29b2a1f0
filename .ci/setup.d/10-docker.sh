#!/usr/bin/env bash
# The docker provider's tests: a static busybox (the tests' box image is
# FROM scratch with it as /bin/sh and its applets), and debootstrap for
# `crabbox image build --provider docker`. The tests build their images
# themselves; nothing is pulled. Idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	apt-get install -y -qq "${need[@]}"
fi
# The engine must answer; the tests fail rather than skip when CI=true.
if [ -S /var/run/docker.sock ] || [ -n "${DOCKER_HOST:-}" ]; then
	echo "docker engine socket present"
else
	echo "warning: no docker engine socket; the docker provider's tests need one" >&2
fi
