#!/usr/bin/env bash
# Puts containerd 1.7 (with NRI) beside the system's containerd, for the NRI plugin's tests:
# Debian trixie's containerd package, extracted (never installed) under one cached folder by
# .ci/debian-extract.sh. The system's containerd, its apt lists and its package cache are left alone.
# Idempotent: does nothing when the extracted binaries already answer with version 1.7.
# Needs root and apt-get (skipped, with a note, otherwise). Called by .ci/system-deps.sh.
set -euo pipefail

dest="${KRE_CONTAINERD17_ROOT:-/var/cache/kube-resource-enforcer/containerd-1.7}"
bin="$dest/root/usr/bin"

if [ -x "$bin/containerd" ] && "$bin/containerd" --version 2>/dev/null | grep -q ' 1\.7\.'; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "containerd17: not root; cannot put containerd 1.7 under $dest" >&2
  exit 0
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "containerd17: no apt-get/dpkg-deb here; the NRI tests need containerd 1.7 under $bin" >&2
  exit 0
fi
"$(dirname "$0")/debian-extract.sh" trixie "$dest" containerd
if ! "$bin/containerd" --version | grep -q ' 1\.7\.'; then
  echo "containerd17: trixie's containerd is not 1.7: $("$bin/containerd" --version)" >&2
  exit 1
fi
echo "containerd17: $(cd "$dest" && ls containerd_*.deb) extracted under $dest"
