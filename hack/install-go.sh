#!/usr/bin/env bash
# Install the Go toolchain that go.mod names (its "go" line) as GOROOT_DIR
# (default /usr/local/go), from the Go module proxy, where the go command
# itself gets toolchains (module golang.org/toolchain): Debian 12's apt has
# no Go that new. Does nothing when GOROOT_DIR/bin/go is that version already.
# Needs curl and unzip (installed with apt when missing, as root).
#
# Usage: hack/install-go.sh      (GOPROXY: default https://proxy.golang.org)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${GOROOT_DIR:-/usr/local/go}
want=go$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$REPO/go.mod")
[ "$want" != go ] || { echo "install-go.sh: no go line in go.mod" >&2; exit 1; }
if [ -x "$dest/bin/go" ] && [ "$("$dest/bin/go" env GOVERSION 2>/dev/null)" = "$want" ]; then
	echo "install-go.sh: $dest has $want"
	exit 0
fi
case "$(uname -m)" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) echo "install-go.sh: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac
need=()
for tool in curl unzip; do command -v "$tool" >/dev/null || need+=("$tool"); done
command -v curl >/dev/null || need+=(ca-certificates)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%[,|]*}
[ "$proxy" != direct ] && [ "$proxy" != off ] || proxy=https://proxy.golang.org
mod=golang.org/toolchain ver=v0.0.1-$want.linux-$arch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "install-go.sh: fetching $mod@$ver from $proxy"
curl -fsSL --retry 3 -o "$work/go.zip" "$proxy/$mod/@v/$ver.zip"
unzip -q "$work/go.zip" -d "$work"
root="$work/$mod@$ver"
# Module zips keep no file modes; mark the executables as the go command does
# when it installs a toolchain.
chmod -R a+rX "$root"
chmod 0755 "$root"/bin/* "$root"/pkg/tool/*/*
"$root/bin/go" version >/dev/null
rm -rf "$dest.old"
[ ! -e "$dest" ] || mv "$dest" "$dest.old"
mkdir -p "$(dirname "$dest")"
mv "$root" "$dest"
rm -rf "$dest.old"
echo "install-go.sh: installed $("$dest/bin/go" env GOVERSION) in $dest (add $dest/bin to PATH)"
