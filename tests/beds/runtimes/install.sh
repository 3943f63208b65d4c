#!/usr/bin/env bash
# Installs every runtime of the test matrix and critest, each by its own script (pinned and
# cached under KRE_BEDS_CACHE, default /var/cache/kube-resource-enforcer): containerd 2.1 (sid's
# package), containerd 2.x built from its Go module, critest, CRI-O. Called by
# .ci/system-deps.sh (so by make test). A script that fails is named and the others still run;
# the tests that need what it installs then fail, naming it. Idempotent and quick when cached.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"

for script in containerd21.sh containerd2.sh critest.sh crio.sh; do
  start=$(date +%s)
  if out=$("$here/$script"); then
    echo "runtimes: $script -> $out ($(( $(date +%s) - start )) s)"
  else
    echo "runtimes: $script failed after $(( $(date +%s) - start )) s" >&2
    :
  fi
done
exit 0  # failures are reported above and by the tests; system-deps goes on
