#!/usr/bin/env bash
# Runs every fuzz target of the root module for FUZZTIME each (default 30s).
#   scripts/fuzz.sh            all targets
#   FUZZTIME=2m scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export GOWORK=off
time=${FUZZTIME:-30s}
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		echo "=== $pkg $target ($time)"
		go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg"
	done
done
