#!/usr/bin/env bash
# Builds the newest containerd 2.x of the test matrix from its Go module: containerd, the runc
# shim and ctr, pinned by tests/beds/runtimes/containerd2/go.{mod,sum}, into one cached folder.
# Test tooling only (never in the wheel or the images). Idempotent: does nothing when the cached
# binaries already answer with the pinned version. Prints the bin folder on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/containerd2"
version=$(awk '$1 == "require" && $2 == "github.com/containerd/containerd/v2" {print $3}' "$module/go.mod")
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/containerd-${version#v}"
bin="$dest/bin"

built() { [ -x "$bin/containerd" ] && "$bin/containerd" --version 2>/dev/null | grep -q " ${version} "; }

if built; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "containerd2: no go command on PATH; Go 1.26 is needed to build containerd $version" >&2; exit 1; }
mkdir -p "$cache"
# One build at a time, whoever asks (the cluster, the runtime matrix and critest share it).
exec 9>"$cache/.containerd2.lock"
flock 9
if built; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.containerd2-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$module/go.mod" "$module/go.sum" "$module/tools.go" "$work/"
pkg=github.com/containerd/containerd/v2/cmd
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=${version} -X github.com/containerd/containerd/v2/version.Revision=gomod"
start=$(date +%s)
(cd "$work" && GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$work/bin/" \
  "$pkg/containerd" "$pkg/containerd-shim-runc-v2" "$pkg/ctr") >&2
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/bin" "$bin"
echo "containerd2: built containerd $version in $(( $(date +%s) - start )) s" >&2
built || { echo "containerd2: $bin/containerd does not answer with $version" >&2; exit 1; }
echo "$bin"
