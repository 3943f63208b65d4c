#!/usr/bin/env bash
# Extracts Debian packages of another suite (trixie, sid) beside the system, never installing them:
#   .ci/debian-extract.sh SUITE DEST PACKAGE...
# downloads each PACKAGE of SUITE with apt (its own sources list, lists and cache in a temporary
# folder: the system's apt state is left alone) and unpacks them all with dpkg-deb -x into
# DEST/root (the .debs are kept in DEST). DEST is replaced only once every package is unpacked.
# Needs root, apt-get and dpkg-deb. Shared by .ci/containerd17.sh and tests/beds/runtimes/.
set -euo pipefail

if [ $# -lt 3 ]; then
  echo "usage: $0 SUITE DEST PACKAGE..." >&2
  exit 2
fi
suite=$1
dest=$2
shift 2

if [ "$(id -u)" != 0 ]; then
  echo "debian-extract: not root; cannot put $* ($suite) under $dest" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
  echo "debian-extract: no apt-get/dpkg-deb here; cannot extract $* ($suite)" >&2
  exit 1
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
  *) uri="http://deb.debian.org/debian" ;;  # Ubuntu's mirror has no Debian suites
esac

work=$(mktemp -d "/tmp/kre-debian-$suite.XXXXXX")
trap 'rm -rf "$work"' EXIT
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
if [ -e "$keyring" ]; then
  echo "deb [signed-by=$keyring] $uri $suite main" >"$work/list"
else
  echo "deb $uri $suite main" >"$work/list"
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
(cd "$work/dl" && apt-get -qq "${apt_opts[@]}" download "$@")
rm -rf "$dest.new"
mkdir -p "$dest.new/root"
for pkg in "$@"; do
  deb=$(ls "$work/dl/${pkg}_"*.deb 2>/dev/null | head -n1 || true)
  if [ -z "$deb" ]; then
    echo "debian-extract: $suite did not give a $pkg package: $(ls "$work/dl")" >&2
    exit 1
  fi
  dpkg-deb -x "$deb" "$dest.new/root"
  cp "$deb" "$dest.new/"
done
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "debian-extract: $(cd "$dest" && ls ./*.deb | tr '\n' ' ')extracted under $dest" >&2
