#!/usr/bin/env bash
# install-deps.sh: the Debian packages test/conformance/build.sh needs beyond the rig's
# (test/rig/install-deps.sh), installed with them: netcat-openbsd is copied into the agnhost
# image as its nc (the specs use nc -u), bzip2 and make build busybox from Debian's source.
# build.sh runs in the background beside the e2e suite, where an apt run could collide with
# another, so it only checks for them (PACKAGES) and this script installs them up front.
set -euo pipefail
PACKAGES=(netcat-openbsd bzip2 make)
if [[ "${1:-}" == --list ]]; then
	echo "${PACKAGES[@]}"
	exit 0
fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/../rig/install-deps.sh" "${PACKAGES[@]}" "$@"
