#!/usr/bin/env bash
# Builds the quickstart (examples/quickstart: the root module alone) and runs
# it: what `make demo` does. Progress is printed while it builds, a line per
# 25 packages compiled. A cold build (empty build cache) compiles about 200
# packages, most of them the standard library's net/http and crypto/tls; it
# is built without cgo (the quickstart needs none, and cgo's C compilations
# are the slowest part of a cold build), without optimizations, inlining or
# debug information (a program that runs for a second needs none of them),
# which together halve the time of a cold build on 2 cores. The binary is
# kept in QUICKSTART_BIN, so a warm `make demo` compiles and links nothing.
#
# It builds in a workspace of two modules, the quickstart and the root,
# written next to the binary: the repository's go.work would do as well
# (the build compiles the same packages), but the go command would first
# read the go.mod of every module that the whole workspace requires (about
# 160 small downloads on an empty module cache); this one needs two.
#
#   scripts/demo.sh
#   QUICKSTART_BIN=/tmp/quickstart scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/../examples/quickstart"
export CGO_ENABLED=0
bin=${QUICKSTART_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/idemkit/quickstart}
mkdir -p "$(dirname "$bin")"
root=$(cd ../.. && pwd)
root_path=$(awk '$1 == "module" { print $2; exit }' "$root/go.mod")
go_version=$(awk '$1 == "go" { print $2; exit }' "$root/go.mod")
version=$(awk -v p="$root_path" '$1 == "require" && $2 == p { print $3 }' go.mod)
[ -n "$version" ] || { echo "make demo: examples/quickstart/go.mod does not require $root_path on one require line" >&2; exit 1; }
export GOWORK="$bin.work"
printf 'go %s\n\nuse (\n\t%s\n\t%s\n)\n\nreplace %s %s => %s\n' "$go_version" "$root" "$PWD" "$root_path" "$version" "$root" >"$GOWORK"

# go build -v names each package as it compiles it, on stderr; anything
# else (errors: lines with a space or a colon) is shown as it comes.
exec 3< <("${GO:-go}" build -v -gcflags="all=-N -l -dwarf=false" -ldflags="-s -w" -o "$bin" . 2>&1)
build=$!
n=0 last=""
echo "make demo: building the quickstart and what it imports (the first time: about 200 packages)"
while IFS= read -r line <&3; do
	case $line in
	*[:\ ]* | "") echo "$line" ;;
	*)
		n=$((n + 1)) last=$line
		if [ $((n % 25)) -eq 0 ]; then
			printf '  %3d packages compiled (%s)\n' "$n" "$last"
		fi
		;;
	esac
done
if ! wait "$build"; then
	echo "make demo: the build failed" >&2
	exit 1
fi
if [ $((n % 25)) -ne 0 ]; then
	printf '  %3d packages compiled (%s)\n' "$n" "$last"
fi
if [ "$n" -eq 0 ]; then
	echo "  up to date"
fi
echo "make demo: running it"
exec "$bin"
