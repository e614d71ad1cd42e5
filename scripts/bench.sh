#!/usr/bin/env bash
# Runs the side-by-side comparisons of the bench module and writes the
# tables into bench/README.md (between its result markers).
#   scripts/bench.sh
#   DURATION=10s scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/../bench"
go test -count=1 -run '^TestReport$' -timeout 60m . -args -report="$PWD/README.md" -duration="${DURATION:-3s}"
echo "wrote bench/README.md"
