#!/usr/bin/env bash
# containerd 2.1 of the test matrix: Debian sid's containerd package (2.1.x; its shim runs
# bookworm's own runc), extracted (never installed) by .ci/debian-extract.sh into one cached
# folder. Test tooling only. Idempotent: does nothing when the cached containerd answers with
# 2.1. Prints the bin folder on success.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/containerd-2.1"
bin="$dest/root/usr/bin"

built() { [ -x "$bin/containerd" ] && "$bin/containerd" --version 2>/dev/null | grep -q ' v\?2\.1\.'; }

if built; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
exec 9>"$cache/.containerd21.lock"
flock 9
if built; then echo "$bin"; exit 0; fi
"$here/../../../.ci/debian-extract.sh" sid "$dest" containerd >&2
built || { echo "containerd21: sid's containerd is not 2.1: $("$bin/containerd" --version)" >&2; exit 1; }
echo "$bin"
