#!/usr/bin/env bash
# Builds the Go NRI baseline (main.go here, on github.com/containerd/nri's stub) from the Go
# module proxy, pinned by go.mod and go.sum here, into a cached folder keyed by the sources'
# hash. Bench tooling only (never in the wheel or the images). Idempotent: does nothing when
# the cached binary of these sources exists. Prints the binary's path on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
key=$(cat "$here/main.go" "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-16)
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/nri-go-baseline-$key"
bin="$dest/nriplugin"

if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "nriplugin: no go command on PATH; Go 1.24 or later is needed" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.nri-go-baseline.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.nri-go-baseline-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$here/main.go" "$here/go.mod" "$here/go.sum" "$work/"
start=$(date +%s)
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$work/nriplugin" .) >&2
mkdir -p "$dest"
mv "$work/nriplugin" "$bin"
echo "nriplugin: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
