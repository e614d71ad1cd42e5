#!/usr/bin/env bash
# Releases every module of the repository at one version, in lockstep.
#
#   scripts/release.sh vX.Y.Z             release (commit if needed, tag)
#   scripts/release.sh vX.Y.Z --dry-run   every step but the commit and the tags;
#                                         the go.mod files are put back as they were
#   scripts/release.sh vX.Y.Z --test      also run every module's tests (scripts/test.sh)
#
# It refuses a tree with changes or untracked files, a malformed version
# (vX.Y.Z, optionally -pre-release; v0 or v1, as the module paths have no
# /vN suffix) and a version already tagged. Then it:
#   1. sets every go.mod's requires of the repository's modules to the
#      version, and the version go.work replaces by each module's folder
#      (no go.mod has a replace directive, and it adds none);
#   2. checks that every go.mod now requires them at that version;
#   3. runs the outside-consumer check (go run ./internal/modcheck): every
#      module is tidy as a user's go command sees it, a module outside the
#      repository builds every released module at the version from a module
#      proxy made of the tree, go install installs the command at the
#      version, and each released module's users' module graph holds only
#      what docs/modules.md allows;
#   4. runs go vet ./... in every module (in the workspace);
#   5. commits "release vX.Y.Z" if step 1 changed anything;
#   6. tags the root module vX.Y.Z and every other released module
#      <dir>/vX.Y.Z (annotated tags), never the modules under examples/ and
#      bench/, which are not released.
# Tests are `make test`'s job (they need the real servers); --test runs them
# here too. Nothing is pushed: the script prints the push command.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/release.sh vX.Y.Z [--dry-run] [--test]" >&2; exit 2; }
die() { echo "release: $*" >&2; exit 1; }

version="" dry=0 tests=0
for arg in "$@"; do
	case $arg in
	--dry-run) dry=1 ;;
	--test) tests=1 ;;
	-*) usage ;;
	*) [ -z "$version" ] || usage; version=$arg ;;
	esac
done
[ -n "$version" ] || usage

pre='(0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)' # a pre-release identifier: no leading zero if numeric
semver="^v(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)\\.(0|[1-9][0-9]*)(-$pre(\\.$pre)*)?\$"
[[ $version =~ $semver ]] || die "$version is not a version: want vX.Y.Z or vX.Y.Z-pre.release"
case ${BASH_REMATCH[1]} in
0 | 1) ;;
*) die "$version: a major version above v1 needs /v${BASH_REMATCH[1]} module paths, which the modules do not have" ;;
esac

git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "not a git work tree"
[ -z "$(git status --porcelain)" ] || die "the tree has changes or untracked files; commit or remove them first:
$(git status --short)"

root_path=$(awk '$1 == "module" { print $2; exit }' go.mod)
[ -n "$root_path" ] || die "cannot read the root module's path from go.mod"

# Every module, the root first; released ones are all but examples/ and bench/.
mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' -printf '%h\n' | sed 's|^\./||' | sort)
released=()
for m in "${modules[@]}"; do
	case $m in examples | examples/* | bench | bench/*) ;; *) released+=("$m") ;; esac
done
tag_of() { if [ "$1" = . ]; then echo "$version"; else echo "$1/$version"; fi; }

for m in "${released[@]}"; do
	t=$(tag_of "$m")
	if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then die "tag $t exists already"; fi
done

echo "release $version of $root_path: ${#modules[@]} modules, ${#released[@]} released"
((dry)) && echo "(dry run: no commit, no tags; the go.mod files are put back afterwards)"

# The go.mod files as they were, for a dry run to put back.
backup=$(mktemp -d)
trap 'rc=$?; rm -rf "$backup"; if ((rc != 0)) && [ -n "$(git status --porcelain -- "*go.mod" go.work)" ]; then echo "release: stopped with the go.mod files or go.work changed; git checkout -- \"*go.mod\" go.work puts them back" >&2; fi' EXIT
if ((dry)); then
	for m in "${modules[@]}"; do mkdir -p "$backup/$m" && cp "$m/go.mod" "$backup/$m/go.mod"; done
	cp go.work "$backup/go.work"
	trap 'for m in "${modules[@]}"; do cp "$backup/$m/go.mod" "$m/go.mod"; done; cp "$backup/go.work" go.work; rm -rf "$backup"' EXIT
fi

# "path version" for each of the repository's modules a go.mod requires
# (require directives only, not replace).
ours_required() {
	awk -v root="$root_path" '
		/^require[ \t]*\(/ { block = 1; next }
		block && /^\)/ { block = 0; next }
		/=>/ { next }
		{
			line = $0
			sub(/^require[ \t]+/, "", line)
			if (!block && line == $0) next
			sub(/^[ \t]+/, "", line)
			split(line, f, /[ \t]+/)
			if (f[1] == root || index(f[1], root "/") == 1) print f[1], f[2]
		}' "$1"
}

# 1. Set the version.
echo "== 1. setting the repository's requires to $version"
for m in "${modules[@]}"; do
	edits=()
	while read -r p _; do edits+=("-require=$p@$version"); done < <(ours_required "$m/go.mod")
	[ ${#edits[@]} -eq 0 ] && continue
	(cd "$m" && go mod edit "${edits[@]}")
done
# go.work replaces the release version of each released module by its
# folder (docs/modules.md says why): the same version.
for m in "${released[@]}"; do
	p=$(awk '$1 == "module" { print $2; exit }' "$m/go.mod")
	dir=./$m
	[ "$m" = . ] && dir=./
	if awk -v p="$p" '$1 == p && $3 == "=>" || $1 == "replace" && $2 == p && $4 == "=>" { found = 1 } END { exit !found }' go.work; then
		# In place, so the replace block keeps its layout.
		pe=$(printf '%s' "$p" | sed 's/[.[\*^$/]/\\&/g')
		sed -i -E "s/^([[:space:]]*(replace[[:space:]]+)?$pe) [^[:space:]]+ =>/\1 $version =>/" go.work
	else
		go work edit -replace="$p@$version=$dir"
	fi
done
changed=$(git status --porcelain -- '*go.mod' go.work | awk '{print $2}')
if [ -n "$changed" ]; then echo "changed:"; echo "$changed" | sed 's/^/  /'; else echo "  every go.mod and go.work already name $version"; fi

# 2. Every go.mod agrees.
echo "== 2. every go.mod requires the repository's modules at $version"
bad=0
for m in "${modules[@]}"; do
	while read -r p v; do
		[ "$v" = "$version" ] && continue
		echo "  $m/go.mod: requires $p $v" >&2
		bad=1
	done < <(ours_required "$m/go.mod")
done
((bad == 0)) || die "the go.mod files disagree"
echo "  ok"

# 3. The outside-consumer check.
echo "== 3. outside-consumer check"
go run ./internal/modcheck -version "$version"

# 4. Vet, every module (tidiness is the outside-consumer check's).
echo "== 4. go vet in every module"
for m in "${modules[@]}"; do
	(cd "$m" && go vet ./...) || die "module $m: go vet failed"
	echo "  ok $m"
done
if ((tests)); then
	echo "== tests (scripts/test.sh)"
	scripts/test.sh || die "tests failed"
else
	echo "   (tests: not run here, they are make test's job; --test runs them)"
fi

# 5. Commit.
echo "== 5. commit"
if [ -z "$changed" ]; then
	echo "  nothing to commit: the tree already requires $version"
elif ((dry)); then
	echo "  would commit \"release $version\":"
	git --no-pager diff --stat -- $changed | sed 's/^/  /'
else
	git add -- $changed
	git commit -q -m "release $version" -- $changed
	echo "  committed $(git rev-parse --short HEAD) \"release $version\""
fi

# 6. Tags.
echo "== 6. tags"
tags=()
for m in "${released[@]}"; do tags+=("$(tag_of "$m")"); done
for t in "${tags[@]}"; do
	if ((dry)); then
		echo "  would tag $t"
	else
		git tag -a -m "release $version" "$t"
		echo "  tagged $t at $(git rev-parse --short "$t^{commit}")"
	fi
done
echo "  never tagged: $(printf '%s\n' "${modules[@]}" | grep -E '^(examples|bench)(/|$)' | tr '\n' ' ')"

if ((dry)); then
	echo "dry run done: nothing committed or tagged; go.mod files put back"
else
	echo "released $version: ${#tags[@]} tags. Push with:"
	echo "  git push origin HEAD ${tags[*]}"
fi
