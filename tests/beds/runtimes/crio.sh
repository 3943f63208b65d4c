#!/usr/bin/env bash
# CRI-O of the test matrix: crio built from its Go module (github.com/cri-o/cri-o, the newest
# release the Go module proxy serves here), pinned by tests/beds/runtimes/crio/go.{mod,sum}, and
# pinns compiled from the same module's C sources, into one cached folder. conmon and runc are
# bookworm's (sid's conmon 2.1.13 and crun 1.28 need glibc 2.38 and libblake3: they do not run on
# bookworm). Test tooling only. Idempotent: does nothing when the cached crio already answers
# with the pinned version. Prints the bin folder on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
# Needs Go, a C compiler, pkg-config and libseccomp-dev (.ci/system-deps.sh installs them).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/crio"
version=$(awk '$1 == "github.com/cri-o/cri-o" {print $2}' "$module/go.mod")
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/crio-${version#v}"
bin="$dest/bin"

built() { [ -x "$bin/crio" ] && [ -x "$bin/pinns" ] && "$bin/crio" --version 2>/dev/null | grep -q "^crio version ${version#v}$"; }

if built; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "crio: no go command on PATH; Go 1.26 is needed to build CRI-O $version" >&2; exit 1; }
command -v cc >/dev/null || { echo "crio: no C compiler (cc); CRI-O needs cgo" >&2; exit 1; }
pkg-config --exists libseccomp || { echo "crio: no libseccomp-dev (pkg-config libseccomp); apt-get install libseccomp-dev" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.crio.lock"
flock 9
if built; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.crio-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$module/go.mod" "$module/go.sum" "$module/tools.go" "$work/"
# CRI-O's own build tags, minus what needs libraries this machine has no -dev package for:
# OpenPGP in Go instead of gpgme, no btrfs or devicemapper graph drivers, no ostree.
tags="containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs btrfs_noversion exclude_graphdriver_devicemapper seccomp"
start=$(date +%s)
(cd "$work" && GOFLAGS=-mod=mod go build -trimpath -tags "$tags" -ldflags "-s -w" \
  -o "$work/bin/crio" github.com/cri-o/cri-o/cmd/crio) >&2
src=$(cd "$work" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' github.com/cri-o/cri-o)
cc -std=c99 -Os -Wall -Wextra -static -O3 -o "$work/bin/pinns" "$src"/pinns/src/*.c >&2
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/bin" "$bin"
echo "crio: built CRI-O $version in $(( $(date +%s) - start )) s" >&2
built || { echo "crio: $bin/crio does not answer with $version: $("$bin/crio" --version 2>&1 | head -3)" >&2; exit 1; }
echo "$bin"
