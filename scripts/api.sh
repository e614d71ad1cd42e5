#!/usr/bin/env bash
# Counts the exported names (functions, types, methods, constants and
# variables) of every released package: everything outside examples/,
# bench/ and internal/, test helper packages included; then the lines of
# released non-test Go (the same packages, cmd/ aside).
#
#   scripts/api.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t pkgs < <(find . -name '*.go' -not -name '*_test.go' -not -path './.git/*' \
	-not -path './examples/*' -not -path './bench/*' -not -path './internal/*' -printf '%h\n' | sed 's|^\./||; s|^\.$|.|' | sort -u)
go run ./internal/apicount "${pkgs[@]}"
printf '%5d  lines of released non-test Go (outside examples/, bench/, internal/, cmd/)\n' \
	"$(find . -name '*.go' -not -name '*_test.go' -not -path './.git/*' -not -path './examples/*' \
		-not -path './bench/*' -not -path './internal/*' -not -path './cmd/*' -exec cat {} + | wc -l)"
