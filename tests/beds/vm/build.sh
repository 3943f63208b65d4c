#!/usr/bin/env bash
# Builds the cgroup v2 test VM's disk image, kernel and initramfs (test tooling only, never in
# the wheel or the images): Debian bookworm made with mmdebstrap from Debian's packages (systemd
# with the unified cgroup hierarchy only, Debian's kernel, runc, python3, busybox-static, an ssh
# server), the containerd 2.x of tests/beds/runtimes/containerd2.sh copied in at the path it has on
# the host (where tests.support.runtimes looks for it; linked from /usr/local/bin), an ssh key pair
# of its own. Cached in KRE_BEDS_CACHE (default /var/cache/kube-resource-enforcer) under a name that
# hashes every input below, so a second run builds nothing. Prints the image folder on success.
# The project itself is not copied in: tests.support.vm shares the checkout with virtfs (9p).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
SUITE=bookworm
VARIANT=minbase
PACKAGES=systemd,systemd-sysv,udev,dbus,linux-image-amd64,initramfs-tools,kmod,runc,python3,python3-venv,busybox-static,openssh-server,iproute2,procps,e2fsprogs,util-linux,mount
if [ -n "${DEBIAN_SNAPSHOT:-}" ]; then
  MIRROR=${DEBIAN_MIRROR:-http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT}
  SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://snapshot.debian.org/archive/debian-security/$DEBIAN_SNAPSHOT}
else
  MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
fi
SOURCES=(
  "deb $MIRROR $SUITE main"
  "deb $MIRROR $SUITE-updates main"
  "deb $SECURITY_MIRROR $SUITE-security main"
)
DISK_SIZE=3G
FORMAT=1  # raise when the recipe below changes in a way the inputs above do not show
CACHE=${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}

missing() { echo "vm: $1 is missing; .ci/system-deps.sh installs it (as root)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || missing mmdebstrap
command -v mkfs.ext4 >/dev/null || missing e2fsprogs
command -v ssh-keygen >/dev/null || missing openssh-client

containerd_bin=$("$here/../runtimes/containerd2.sh")
containerd_version=$("$containerd_bin/containerd" --version | awk '{print $3}')

key=$(printf '%s\n' "$FORMAT" "$SUITE" "$VARIANT" "$PACKAGES" "$(uname -m)" "$DISK_SIZE" \
  "$containerd_version" "${SOURCES[@]}" | cat - "$0" | sha256sum | cut -c1-16)
dest="$CACHE/vm-$SUITE-$key"

built() { [ -s "$dest/disk.raw" ] && [ -s "$dest/vmlinuz" ] && [ -s "$dest/initrd.img" ] && [ -s "$dest/id_ed25519" ]; }
if built; then echo "$dest"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.vm-build.lock"
flock 9
if built; then echo "$dest"; exit 0; fi

start=$(date +%s)
work=$(mktemp -d "$CACHE/.vm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
ssh-keygen -q -t ed25519 -N '' -C kre-vm -f "$work/id_ed25519"
mkdir -p "$work/root"
echo "vm: building the image with mmdebstrap (about 5 minutes)" >&2
# The customize hooks: fstab, hostname, networking by systemd-networkd (DHCP from QEMU's user
# network), root's ssh key, the containerd binaries, BFQ loaded at boot, a serial console.
mmdebstrap --quiet --mode=root --format=directory --variant="$VARIANT" \
  --include="$PACKAGES" \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='echo "LABEL=kreroot / ext4 defaults,errors=remount-ro 0 1" >"$1/etc/fstab"' \
  --customize-hook='echo kre-vm >"$1/etc/hostname"; echo "127.0.1.1 kre-vm" >>"$1/etc/hosts"' \
  --customize-hook='mkdir -p "$1/etc/systemd/network" && printf "[Match]\nName=en*\n\n[Network]\nDHCP=ipv4\n" >"$1/etc/systemd/network/10-wired.network"' \
  --customize-hook='chroot "$1" systemctl enable systemd-networkd ssh >/dev/null 2>&1' \
  --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer systemd-timesyncd.service >/dev/null 2>&1 || true' \
  --customize-hook="mkdir -p \"\$1/root/.ssh\" && cp $work/id_ed25519.pub \"\$1/root/.ssh/authorized_keys\" && chmod 700 \"\$1/root/.ssh\"" \
  --customize-hook="mkdir -p \"\$1$containerd_bin\" && cp $containerd_bin/containerd $containerd_bin/containerd-shim-runc-v2 $containerd_bin/ctr \"\$1$containerd_bin/\"" \
  --customize-hook="for p in containerd containerd-shim-runc-v2 ctr; do ln -s $containerd_bin/\$p \"\$1/usr/local/bin/\$p\"; done" \
  --customize-hook='printf "bfq\n9p\n9pnet_virtio\n" >"$1/etc/modules-load.d/kre.conf"' \
  --customize-hook='passwd --root "$1" -d root >/dev/null' \
  --customize-hook='printf "PermitRootLogin prohibit-password\nUseDNS no\n" >"$1/etc/ssh/sshd_config.d/kre.conf"' \
  --customize-hook='cp "$1"/boot/vmlinuz-* '"$work/vmlinuz"' && cp "$1"/boot/initrd.img-* '"$work/initrd.img" \
  "$SUITE" "$work/root" "${SOURCES[@]}" >&2
# The root file system on an ext4 disk image (sparse), labelled for the fstab above.
mkfs.ext4 -q -F -L kreroot -d "$work/root" "$work/disk.raw" "$DISK_SIZE"
chmod 644 "$work/vmlinuz" "$work/initrd.img"
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/disk.raw" "$work/vmlinuz" "$work/initrd.img" "$work/id_ed25519" "$work/id_ed25519.pub" "$dest/"
awk '/^Package: /{p=$2} /^Version: /{print p "=" $2}' "$work/root/var/lib/dpkg/status" | sort >"$dest/versions"
echo "vm: built $dest in $(( $(date +%s) - start )) s" >&2
echo "$dest"
