#!/usr/bin/env bash
# A newcomer's first session with crabbox, on the embedded local provider.
# CI runs it (.ci/run); every step must succeed. Run it yourself with:
#
#   bash docs/walkthrough.sh
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export CRABBOX_STATE_DIR="$work/state" CRABBOX_CONFIG="$work/no-config"

step() { printf '\n== %s\n' "$*"; }

step "build crabbox"
(cd "$repo_root" && go build -o "$work/crabbox" ./cmd/crabbox)
crabbox() { "$work/crabbox" "$@"; }

step "a project to work on"
mkdir "$work/project" && cd "$work/project"
git init -q
echo 'echo hello from the box' > hello.sh
git add hello.sh && git -c user.name=me -c user.email=me@example.com commit -qm start
echo 'not committed yet' > notes.txt

step "what would be synced"
crabbox sync-plan

step "a one-shot run: acquire, sync, run, release"
crabbox run -- sh hello.sh

step "the command's exit code comes back"
set +e; crabbox run -- sh -c 'exit 7'; code=$?; set -e
[ "$code" = 7 ] || { echo "want exit 7, got $code"; exit 1; }

step "a warm box for several runs"
lease=$(crabbox warmup --json)
id=$(printf '%s' "$lease" | sed -n 's/.*"id": "\(cbx_[0-9a-f]*\)".*/\1/p')
slug=$(printf '%s' "$lease" | sed -n 's/.*"slug": "\([a-z0-9-]*\)".*/\1/p')
echo "leased $id ($slug)"
crabbox run --id "$slug" -- cat notes.txt
crabbox list
crabbox status "$slug"

step "ssh into it (here only printing the OpenSSH command)"
crabbox ssh --print "$slug"

step "keep it alive"
crabbox heartbeat "$slug"

step "history and logs"
crabbox history
run_id=$(crabbox history --json --limit 1 | sed -n 's/.*"runId": "\(run_[0-9a-f]*\)".*/\1/p' | head -n 1)
crabbox logs "$run_id"

step "release it"
crabbox stop "$id"
crabbox list --json

step "cleanup (dry run) and the providers"
crabbox cleanup --dry-run
crabbox providers --json

echo
echo "walkthrough passed"
