#!/usr/bin/env bash
# Runs every fuzz target of every module for FUZZTIME each (default 30s).
#   scripts/fuzz.sh            all targets
#   FUZZTIME=2m scripts/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
time=${FUZZTIME:-30s}
mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)
for m in "${modules[@]}"; do
	(
		cd "$m"
		for pkg in $(go list ./...); do
			for target in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
				echo "=== $pkg $target ($time)"
				go test -run '^$' -fuzz "^${target}\$" -fuzztime "$time" "$pkg"
			done
		done
	)
done
