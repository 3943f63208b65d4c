#!/usr/bin/env bash
# Builds critest (the CRI validation suite of sigs.k8s.io/cri-tools, a ginkgo suite built with
# `go test -c` as cri-tools' Makefile builds it), pinned by tests/beds/runtimes/critest/go.{mod,sum},
# into one cached folder. Test tooling only. Idempotent: does nothing when the cached critest
# already answers with the pinned version. Prints the bin folder on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/critest"
version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/cri-tools" {print $3}' "$module/go.mod")
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/critest-${version#v}"
bin="$dest/bin"

built() { [ -x "$bin/critest" ] && "$bin/critest" --version 2>/dev/null | grep -q "critest version: ${version}$"; }

if built; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "critest: no go command on PATH; Go 1.26 is needed to build critest $version" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.critest.lock"
flock 9
if built; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.critest-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$module/go.mod" "$module/go.sum" "$module/tools.go" "$work/"
start=$(date +%s)
# -mod=mod: the build list is cri-tools' own (its go.mod, the only requirement); go.sum pins
# every module's hash.
(cd "$work" && GOFLAGS=-mod=mod go test -c -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${version}" \
  -o "$work/bin/critest" sigs.k8s.io/cri-tools/cmd/critest) >&2
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/bin" "$bin"
echo "critest: built critest $version in $(( $(date +%s) - start )) s" >&2
built || { echo "critest: $bin/critest does not answer with $version" >&2; exit 1; }
echo "$bin"
