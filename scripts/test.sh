#!/usr/bin/env bash
# Checks and tests every Go module in the repository, each in its folder
# (in the workspace of the root's go.work, as a plain go command there
# runs): gofmt, go vet, go test -race. Prints one closing line per module
# and exits non-zero if any failed. A run of all tests also runs the
# outside-consumer check once, after the modules (go run ./internal/modcheck,
# without the workspace: every module is tidy as a user's go command sees
# it, a module outside the repository builds every released module from a
# module proxy made of the tree, go install installs the command, and each
# released module's users' module graph holds only what docs/modules.md
# allows), and fails if it fails.
#
#   scripts/test.sh            all modules
#   scripts/test.sh lock/...   extra arguments go to go test (default ./...)
set -uo pipefail
cd "$(dirname "$0")/.."
pkgs=("${@:-./...}")

mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sort)
failed=()
for m in "${modules[@]}"; do
	name=${m#./}; name=${name:-.}
	echo "=== module $name"
	step=""
	(
		cd "$m" || exit 1
		dirs=$(go list -f '{{.Dir}}' ./...) || exit 1
		# Only this module's files: gofmt would recurse into nested modules.
		files=$(for d in $dirs; do find "$d" -maxdepth 1 -name '*.go'; done)
		unformatted=$(gofmt -l $files)
		if [ -n "$unformatted" ]; then echo "gofmt: these files need formatting:"; echo "$unformatted"; exit 2; fi
		go vet ./... || exit 3
		go test -race -shuffle=on -count=1 "${pkgs[@]}" || exit 5
	)
	rc=$?
	case $rc in
	0) echo "--- ok    $name: gofmt, vet, tests (race) all pass" ;;
	2) step=gofmt ;; 3) step=vet ;; 5) step=tests ;; *) step="go list" ;;
	esac
	if [ $rc -ne 0 ]; then
		echo "--- FAIL  $name: $step failed"
		failed+=("$name")
	fi
done
checked=0
if [ $# -eq 0 ]; then
	echo "=== outside-consumer check"
	checked=1
	if go run ./internal/modcheck; then
		echo "--- ok    outside-consumer check"
	else
		echo "--- FAIL  outside-consumer check"
		failed+=("outside-consumer-check")
	fi
fi
echo
if [ ${#failed[@]} -ne 0 ]; then
	echo "FAIL: ${#failed[@]} of ${#modules[@]} modules failed: ${failed[*]}"
	exit 1
fi
if ((checked)); then
	echo "ok: all ${#modules[@]} modules and the outside-consumer check pass"
else
	echo "ok: all ${#modules[@]} modules pass"
fi
