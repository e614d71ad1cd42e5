#!/usr/bin/env bash
# The everyday loop (`make check`): gofmt, go vet and the tests (without
# the race detector) of the root module and of every module with changes,
# each in its folder (in the workspace of the root's go.work). Changes are counted against the merge base
# with origin/main when there is one, against HEAD (uncommitted changes)
# otherwise; untracked files count. Outside a git checkout it checks every
# module. `make test` is the full run: every module with the race detector,
# and the outside-consumer check (go mod tidy among its steps).
#
# Prints one closing line per module and exits non-zero if any failed.
#
#   scripts/check.sh            the root and the changed modules
#   scripts/check.sh -run Foo   extra arguments go to go test (after ./...)
set -uo pipefail
cd "$(dirname "$0")/.."

mapfile -t all < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sed 's|^\./||; s|^\.$|.|' | sort)

# module_of prints the module a repository path belongs to: the deepest
# folder above it with a go.mod.
module_of() {
	local d
	d=$(dirname "$1")
	while [ "$d" != . ] && [ ! -f "$d/go.mod" ]; do
		d=$(dirname "$d")
	done
	echo "$d"
}

if git rev-parse --git-dir >/dev/null 2>&1; then
	if base=$(git merge-base origin/main HEAD 2>/dev/null); then
		against="origin/main (merge base ${base:0:12})"
	else
		base=HEAD
		against="HEAD (uncommitted changes)"
	fi
	mapfile -t changed < <({
		git diff --name-only "$base" --
		git ls-files --others --exclude-standard
	} | while read -r f; do module_of "$f"; done | sort -u)
	mapfile -t modules < <(printf '%s\n' . "${changed[@]}" | sort -u)
	# A module whose folder is gone (deleted in the changes) has nothing to check.
	mapfile -t modules < <(for m in "${modules[@]}"; do [ -f "$m/go.mod" ] && echo "$m"; done)
else
	against="nothing (not a git checkout: every module)"
	modules=("${all[@]}")
fi
echo "check: the root and the modules changed against $against: ${modules[*]}"

failed=()
for m in "${modules[@]}"; do
	echo "=== module $m"
	step=""
	(
		cd "$m" || exit 1
		dirs=$(go list -f '{{.Dir}}' ./...) || exit 1
		# Only this module's files: gofmt would recurse into nested modules.
		files=$(for d in $dirs; do find "$d" -maxdepth 1 -name '*.go'; done)
		unformatted=$(gofmt -l $files)
		if [ -n "$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$unformatted"; exit 2; fi
		go vet ./... || exit 3
		go test -count=1 ./... "$@" || exit 5
	)
	rc=$?
	case $rc in
	0) echo "--- ok    $m: gofmt, vet, tests pass" ;;
	2) step=gofmt ;; 3) step=vet ;; 5) step=tests ;; *) step="go list" ;;
	esac
	if [ $rc -ne 0 ]; then
		echo "--- FAIL  $m: $step failed"
		failed+=("$m")
	fi
done
echo
if [ ${#failed[@]} -ne 0 ]; then
	echo "FAIL: ${#failed[@]} of ${#modules[@]} modules failed: ${failed[*]}"
	exit 1
fi
echo "ok: ${#modules[@]} modules pass (make test runs all ${#all[@]}, with -race, and the outside-consumer check)"
