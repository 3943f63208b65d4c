#!/usr/bin/env bash
# Builds critest (the CRI validation suite of sigs.k8s.io/cri-tools, a ginkgo suite built with
# `go test -c` as cri-tools' Makefile builds it), pinned by tests/beds/runtimes/critest/go.{mod,sum},
# into one cached folder, with the ginkgo CLI beside it (critest --parallel=N execs `ginkgo
# --nodes=N` from PATH), at the ginkgo version pinned in the same go.mod (cri-tools' own). Test
# tooling only. Idempotent: builds only what is missing or answers with another version. Prints
# the bin folder on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/critest"
# A module's version in go.mod, on a `require M v` line or in the require block.
required() { awk -v m="$1" '$1 == "require" && $2 == m {print $3} $1 == m {print $2}' "$module/go.mod"; }
version=$(required sigs.k8s.io/cri-tools)
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/critest-${version#v}"
bin="$dest/bin"

ginkgo_version=$(required github.com/onsi/ginkgo/v2)
[ -n "$version" ] && [ -n "$ginkgo_version" ] || { echo "critest: $module/go.mod requires no cri-tools or no ginkgo" >&2; exit 1; }

critest_built() { [ -x "$bin/critest" ] && "$bin/critest" --version 2>/dev/null | grep -q "critest version: ${version}$"; }
ginkgo_built() { [ -x "$bin/ginkgo" ] && "$bin/ginkgo" version 2>/dev/null | grep -q "Ginkgo Version ${ginkgo_version#v}$"; }
built() { critest_built && ginkgo_built; }

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
# -mod=mod: the build list is cri-tools' own (its go.mod, and ginkgo at the version it requires);
# go.sum pins every module's hash.
if ! critest_built; then
  (cd "$work" && GOFLAGS=-mod=mod go test -c -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${version}" \
    -o "$work/bin/critest" sigs.k8s.io/cri-tools/cmd/critest) >&2
  mkdir -p "$bin"
  mv "$work/bin/critest" "$bin/critest"
  echo "critest: built critest $version in $(( $(date +%s) - start )) s" >&2
fi
if ! ginkgo_built; then
  start=$(date +%s)
  (cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" \
    -o "$work/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo) >&2
  mkdir -p "$bin"
  mv "$work/bin/ginkgo" "$bin/ginkgo"
  echo "critest: built the ginkgo CLI $ginkgo_version in $(( $(date +%s) - start )) s" >&2
fi
critest_built || { echo "critest: $bin/critest does not answer with $version" >&2; exit 1; }
ginkgo_built || { echo "critest: $bin/ginkgo does not answer with $ginkgo_version" >&2; exit 1; }
echo "$bin"
