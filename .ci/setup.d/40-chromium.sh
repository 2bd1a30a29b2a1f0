#!/usr/bin/env bash
# Debian's chromium for the portal's browser tests (coordinator/portal,
# driven with chromedp; they reach only loopback). Idempotent; run as root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if ! command -v chromium >/dev/null; then
	apt-get update -qq
	apt-get install -y -qq chromium
fi
chromium --version
