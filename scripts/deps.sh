#!/usr/bin/env bash
# Installs what `make test` needs when it is missing, on Debian or Ubuntu
# (apt-get; through sudo when not run as root):
#
#   make, gcc, libc6-dev     the targets; the race detector needs cgo (and
#                            the C library's headers, which gcc only
#                            recommends), and internal/testenv builds the
#                            shim that shifts a test server's clock
#   redis-server             the tests start Redis and a Redis Cluster
#   postgresql               the tests run initdb and postgres
#   mariadb-server           the tests run mariadb-install-db and mariadbd
#                            in temporary directories (the system service
#                            the package may start is not used)
#   openjdk-17-jre-headless  Java, for the Firestore emulator
#   google-cloud-cli-firestore-emulator
#                            Google's Firestore emulator, from Google's Cloud
#                            SDK apt repository (added when apt does not
#                            know the package yet)
#   nodejs, npm, dynalite    dynalite (npm's dynalite@4.0.0, installed with
#                            npm install -g, so its command is on PATH), a
#                            DynamoDB server for the DynamoDB engine's tests
#
# Java and the emulator are not needed when FIRESTORE_EMULATOR_HOST (a
# running emulator) or IDEMKIT_FIRESTORE_EMULATOR_JAR (the emulator's jar) is
# set, nor dynalite when IDEMKIT_DYNAMODB_URL (a running endpoint) is. It
# is idempotent: when everything is there it installs nothing and
# prints nothing. `make test`, `make check` and .ci/run call it first.
#
#   scripts/deps.sh             install what is missing
#   DRY_RUN=1 scripts/deps.sh   print what it would run, change nothing
set -euo pipefail

me=scripts/deps.sh
dry=${DRY_RUN:-}

# firestore_jar reports whether the emulator's jar is in one of the places
# internal/testenv looks for it.
firestore_jar() {
	local roots=(/usr/lib/google-cloud-sdk /usr/share/google-cloud-sdk /google-cloud-sdk /opt/google-cloud-sdk)
	if command -v gcloud >/dev/null; then
		roots=("$(gcloud info --format='value(installation.sdk_root)' 2>/dev/null || true)" "${roots[@]}")
	fi
	local r
	for r in "${roots[@]}"; do
		[ -n "$r" ] && [ -f "$r/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar" ] && return 0
	done
	return 1
}

has_initdb() {
	command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

has_mariadbd() {
	command -v mariadbd >/dev/null || command -v mysqld >/dev/null || [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]
}

missing=()
command -v make >/dev/null || missing+=(make)
command -v gcc >/dev/null || missing+=(gcc)
[ -e /usr/include/stdio.h ] || missing+=(libc6-dev)
command -v redis-server >/dev/null || missing+=(redis-server)
has_initdb || missing+=(postgresql)
has_mariadbd || missing+=(mariadb-server)
firestore=""
if [ -z "${FIRESTORE_EMULATOR_HOST:-}" ] && [ -z "${IDEMKIT_FIRESTORE_EMULATOR_JAR:-}" ]; then
	command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
	if ! firestore_jar; then
		missing+=(google-cloud-cli-firestore-emulator)
		firestore=1
	fi
fi
dynalite=""
if [ -z "${IDEMKIT_DYNAMODB_URL:-}" ] && ! command -v dynalite >/dev/null; then
	command -v node >/dev/null || missing+=(nodejs)
	command -v npm >/dev/null || missing+=(npm)
	dynalite=1
fi
[ ${#missing[@]} -eq 0 ] && [ -z "$dynalite" ] && exit 0

wanted=("${missing[@]}")
[ -n "$dynalite" ] && wanted+=(dynalite)
echo "$me: installing what the tests need: ${wanted[*]}"
if [ ${#missing[@]} -gt 0 ] && ! command -v apt-get >/dev/null; then
	echo "$me: apt-get not found: install these yourself: ${missing[*]}" >&2
	exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null; then
		echo "$me: not root and no sudo: install these as root: ${missing[*]}" >&2
		exit 1
	fi
	sudo=(sudo)
fi

# run runs a command, or prints it under DRY_RUN.
run() {
	if [ -n "$dry" ]; then
		echo "  would run: $*"
		return 0
	fi
	"$@"
}
# candidate reports whether apt can install the package.
candidate() {
	apt-cache policy "$1" 2>/dev/null | grep 'Candidate: [^(]' >/dev/null # no -q: pipefail would see apt-cache's SIGPIPE
}
# apt_install installs the packages; one already installed (whose command
# this script did not find) is left at its version (--no-upgrade).
# Its output goes to a log, shown only when it fails.
apt_install() {
	if [ -n "$dry" ]; then
		run "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "$@"
		return
	fi
	local log
	log=$(mktemp)
	if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-upgrade "$@" >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "$me: apt-get install $* failed" >&2
		return 1
	fi
	rm -f "$log"
}

# npm_install installs dynalite for every user (npm install -g: its
# command lands beside node's, on PATH); its output goes to a log, shown
# only when it fails.
npm_install() {
	if [ -n "$dry" ]; then
		run "${sudo[@]}" npm install -g --no-fund --no-audit dynalite@4.0.0
		return
	fi
	local log
	log=$(mktemp)
	if ! "${sudo[@]}" npm install -g --no-fund --no-audit dynalite@4.0.0 >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "$me: npm install -g dynalite@4.0.0 failed" >&2
		return 1
	fi
	rm -f "$log"
}

if [ ${#missing[@]} -eq 0 ]; then
	npm_install
	[ -n "$dry" ] && exit 0
	command -v dynalite >/dev/null || { echo "$me: installed dynalite, but its command is not on PATH (see npm prefix -g)" >&2; exit 1; }
	echo "$me: installed dynalite"
	exit 0
fi

run "${sudo[@]}" apt-get update -qq

# The emulator comes from Google's Cloud SDK repository: add it when apt
# does not know the package (a bare Debian machine).
if [ -n "$firestore" ] && ! candidate google-cloud-cli-firestore-emulator; then
	echo "$me: adding Google's Cloud SDK apt repository (packages.cloud.google.com)"
	keyring=/usr/share/keyrings/cloud.google.gpg
	apt_install ca-certificates curl gnupg
	if [ -n "$dry" ]; then
		echo "  would run: curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | gpg --dearmor -o $keyring"
		echo "  would write /etc/apt/sources.list.d/google-cloud-sdk.list"
	else
		curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg | "${sudo[@]}" gpg --dearmor --yes -o "$keyring"
		echo "deb [signed-by=$keyring] https://packages.cloud.google.com/apt cloud-sdk main" |
			"${sudo[@]}" tee /etc/apt/sources.list.d/google-cloud-sdk.list >/dev/null
	fi
	run "${sudo[@]}" apt-get update -qq
fi

# Java 17 where the release has it (Debian 12, Ubuntu 22.04 and 24.04),
# the release's default Java otherwise. (A dry run asks apt's package
# lists as they are, without the update it only prints: its choice may
# differ from a real run's.)
for i in "${!missing[@]}"; do
	if [ "${missing[$i]}" = openjdk-17-jre-headless ] && ! candidate openjdk-17-jre-headless; then
		missing[i]=default-jre-headless
	fi
done
apt_install "${missing[@]}"
if [ -n "$dynalite" ]; then
	npm_install
fi
[ -n "$dry" ] && exit 0
if [ -n "$dynalite" ] && ! command -v dynalite >/dev/null; then
	echo "$me: installed dynalite, but its command is not on PATH (see npm prefix -g)" >&2
	exit 1
fi

# apt-get's status covers the rest; the emulator's jar must be where the
# tests look for it.
if [ -n "$firestore" ] && { ! command -v java >/dev/null || ! firestore_jar; }; then
	echo "$me: installed google-cloud-cli-firestore-emulator, but Java or the emulator's jar is still missing" >&2
	exit 1
fi
echo "$me: installed ${wanted[*]}"
