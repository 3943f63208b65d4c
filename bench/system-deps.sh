#!/usr/bin/env bash
# The benchmarks' own system packages, apart from `make test`'s (.ci/system-deps.sh): wrk, the
# load generator of `python -m bench webhook`, and Debian's Go toolchain with grpc-go's sources
# (under /usr/share/gocode) for the Go baselines in bench/baselines/, built offline in GOPATH
# mode by bench/gobuild.py. Without them the benchmarks still run and say what they left out.
# Idempotent; needs root (skipped, with a note, otherwise).
set -euo pipefail

need=()
command -v wrk >/dev/null || need+=(wrk)
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/google.golang.org/grpc ] || need+=(golang-google-grpc-dev)
command -v taskset >/dev/null || need+=(util-linux)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "bench/system-deps.sh: missing ${need[*]}; run as root to install them" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
