#!/usr/bin/env bash
# Installs the system packages that `make test` and `make demo` need on Debian/Ubuntu.
# Idempotent: installs only what is missing. Needs root (it is skipped, with a note, otherwise).
set -euo pipefail

need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /bin/busybox ] || command -v busybox >/dev/null || need+=(busybox-static)
command -v curl >/dev/null || need+=(curl ca-certificates)
command -v kubectl >/dev/null || need+=(kubernetes-client)
command -v make >/dev/null || need+=(make)
command -v wrk >/dev/null || need+=(wrk)  # bench/webhook: fixed-concurrency load
# tests/images: podman builds and runs the images; mmdebstrap makes their Debian base
# (.ci/base-image.sh), which needs Debian's archive keyring on other distributions.
command -v podman >/dev/null || need+=(podman)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
# The cluster test bed (tests/beds/cluster/): CNI plugins, iptables for its one service rule,
# gcc and a static libc for the pause program. Go itself comes with the machine (Go 1.26).
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v iptables >/dev/null || need+=(iptables)
command -v gcc >/dev/null || need+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || need+=(libc6-dev)
command -v ip >/dev/null || need+=(iproute2)
# tests/critest: a loopback registry serving critest's images; tests/beds/runtimes builds
# containerd 2.x, critest and CRI-O with Go (cgo: the C compiler above, pkg-config, libseccomp-dev).
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v skopeo >/dev/null || need+=(skopeo)
command -v pkg-config >/dev/null || need+=(pkg-config)
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
# CRI-O 1.34.0 panics on a pod with host ports when the nft program is missing (its hostport
# manager calls a nil nftables manager: critest's port-mapping specs took CRI-O down).
command -v nft >/dev/null || need+=(nftables)
# tests/vm: the cgroup v2 test VM (tests/beds/vm/build.sh, tests/support/vm.py): QEMU's software
# emulation, qemu-img for its overlay disks, mkfs.ext4 -d for its image, ssh into it.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v ssh >/dev/null || need+=(openssh-client)

# containerd 1.7 with NRI for the NRI plugin's tests, beside (never instead of) the system's;
# then the rest of the runtime matrix and critest (tests/beds/runtimes, docs/testing.md).
containerd17() {
  "$(dirname "$0")/containerd17.sh"
  if [ "$(id -u)" = 0 ]; then "$(dirname "$0")/../tests/beds/runtimes/install.sh"; fi
}

if [ ${#need[@]} -eq 0 ]; then
  containerd17
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "system-deps: missing ${need[*]}; run as root to install them" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# A package this release does not have (Ubuntu ships kubectl as a snap, not kubernetes-client)
# is named, not fatal: the tests that need it say what is missing.
available=()
for pkg in "${need[@]}"; do
  if apt-cache show "$pkg" >/dev/null 2>&1; then
    available+=("$pkg")
  else
    echo "system-deps: no package $pkg in this release's archive; install it another way" >&2
  fi
done
apt-get install -y -qq --no-install-recommends "${available[@]}"
containerd17
