#!/usr/bin/env bash
# mod-download.sh: downloads the modules of nodelet and of every module the test stages build
# (the rig's binaries, the conformance suite), all into the shared module cache. Network-bound:
# test-all.sh runs it beside the apt install, so the builds after it only compile.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=/usr/local/go/bin:$PATH
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
rc=0
for mod in go.mod test/rig/*/go.mod test/conformance/go.mod; do
	[[ -f "$mod" ]] || continue
	dir=$(dirname "$mod")
	start=$SECONDS
	if (cd "$dir" && go mod download); then
		echo "modules of $dir downloaded in $((SECONDS - start))s"
	else
		echo "go mod download in $dir failed (the build that needs it will say why)"
		rc=1
	fi
done
exit "$rc"
