#!/usr/bin/env bash
# Puts containerd 1.7 (with NRI) beside the system's containerd, for the NRI plugin's tests:
# Debian trixie's containerd package, extracted (never installed) under one cached folder.
# The system's containerd, its apt lists and its package cache are left alone.
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

# The Debian mirror this machine already uses (deb822 .sources first, then one-line lists).
uri=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
  [ -n "$uri" ] && break
done
if [ -z "$uri" ] && [ -e /etc/apt/sources.list ]; then
  uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
case "$uri" in
  *debian*) ;;
  *) uri="http://deb.debian.org/debian" ;;  # Ubuntu's mirror has no trixie
esac

work=$(mktemp -d /tmp/kre-containerd17.XXXXXX)
trap 'rm -rf "$work"' EXIT
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -e "$keyring" ]; then
  echo "deb [signed-by=$keyring] $uri trixie main" >"$work/list"
else
  echo "deb $uri trixie main" >"$work/list"
fi
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/dl"
# _apt must be able to write the downloads (apt drops privileges to it).
chmod 755 "$work"
chown _apt "$work/dl" "$work/lists/partial" "$work/cache/archives/partial" 2>/dev/null || true
apt_opts=(
  -o "Dir::Etc::sourcelist=$work/list"
  -o Dir::Etc::sourceparts=/dev/null
  -o "Dir::State::lists=$work/lists"
  -o "Dir::Cache=$work/cache"
)
apt-get -qq "${apt_opts[@]}" update
(cd "$work/dl" && apt-get -qq "${apt_opts[@]}" download containerd)
deb=$(ls "$work"/dl/containerd_1.7.*.deb 2>/dev/null | head -n1 || true)
if [ -z "$deb" ]; then
  echo "containerd17: trixie did not give a containerd 1.7 package: $(ls "$work/dl")" >&2
  exit 1
fi
rm -rf "$dest.new"
mkdir -p "$dest.new"
dpkg-deb -x "$deb" "$dest.new/root"
cp "$deb" "$dest.new/"
"$dest.new/root/usr/bin/containerd" --version
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "containerd17: $(basename "$deb") extracted under $dest"
