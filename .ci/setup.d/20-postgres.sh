#!/usr/bin/env bash
# PostgreSQL for the coordinator store tests (coordinator/store/postgres).
# Installs Debian's postgresql when missing, makes sure a cluster runs, and
# creates the role and database the tests use, reachable on 127.0.0.1:
#
#   CRABBOX_TEST_POSTGRES=postgres://crabbox:crabbox@127.0.0.1:5432/crabbox_test?sslmode=disable
#
# (the port is the cluster's; it is printed at the end). Idempotent; run as root.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

role=crabbox
password=crabbox
database=crabbox_test

if ! command -v pg_lsclusters >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
	apt-get update -qq
	apt-get install -y -qq postgresql
fi

version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1 "/" $2}' | grep -qx "$version/main"; then
	pg_createcluster "$version" main
fi
port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}' | grep -q online; then
	pg_ctlcluster "$version" main start
fi

for _ in $(seq 1 60); do
	pg_isready -q -h 127.0.0.1 -p "$port" && break
	sleep 0.5
done
pg_isready -h 127.0.0.1 -p "$port"

as_postgres() { runuser -u postgres -- psql -v ON_ERROR_STOP=1 -qtA -p "$port" "$@"; }

if [ "$(as_postgres -c "SELECT 1 FROM pg_roles WHERE rolname = '$role'")" != 1 ]; then
	as_postgres -c "CREATE ROLE $role LOGIN PASSWORD '$password'"
fi
if [ "$(as_postgres -c "SELECT 1 FROM pg_database WHERE datname = '$database'")" != 1 ]; then
	as_postgres -c "CREATE DATABASE $database OWNER $role"
fi

echo "postgres ready: postgres://$role:$password@127.0.0.1:$port/$database?sslmode=disable"
