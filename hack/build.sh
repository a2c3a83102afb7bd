#!/usr/bin/env bash
# Build nodelet as a release does: _output/nodelet (or -o PATH), with the version
# stamped into k8s.io/component-base/version by -ldflags -X, as the kubelet's build
# stamps it. The version comes from one place, the Default constant of
# internal/version/version.go (also what an unstamped `go build` reports); the git
# commit and tree state are added when the tree is a git checkout.
#
# Usage: hack/build.sh [-o PATH] [--print-version]
#   -o PATH            output binary (default: _output/nodelet under the repo)
#   --print-version    print the version it would stamp (v1.37.2+nodelet) and exit
# Environment: GOFLAGS, CGO_ENABLED and the like pass through to `go build`.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH=/usr/local/go/bin:$PATH
out="$REPO/_output/nodelet"
print=false
while [ $# -gt 0 ]; do
	case "$1" in
	-o) out="${2:?-o needs a path}"; shift 2 ;;
	-o=*|--output=*) out="${1#*=}"; shift ;;
	--print-version) print=true; shift ;;
	*) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
	esac
done

# -o is relative to the caller's directory; the build runs in the repo.
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

version=$(sed -n 's/^const Default = "\(v[^"]*\)"$/\1/p' "$REPO/internal/version/version.go")
[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+ ]] || { echo "build.sh: no version in internal/version/version.go" >&2; exit 1; }
if $print; then
	echo "$version"
	exit 0
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

commit="" tree=""
if git -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
	commit=$(git -C "$REPO" rev-parse HEAD)
	tree=clean
	[ -z "$(git -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ] || tree=dirty
fi
# SOURCE_DATE_EPOCH (reproducible builds) wins over the clock.
build_date=$(date -u ${SOURCE_DATE_EPOCH:+-d "@$SOURCE_DATE_EPOCH"} +%Y-%m-%dT%H:%M:%SZ)

pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=$tree -X $pkg.buildDate=$build_date"

mkdir -p "$(dirname "$out")"
cd "$REPO"
go build -ldflags "$ldflags" -o "$out" ./cmd/nodelet
echo "build.sh: $out ($version${commit:+, $commit${tree:+ $tree}})"
