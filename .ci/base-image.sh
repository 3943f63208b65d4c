#!/usr/bin/env bash
# A base image for Dockerfile.webhook and Dockerfile.enforcer made from Debian's own packages,
# for building and testing the images on a machine that reaches Debian's archive and PyPI but no
# container registry. Production builds keep the Dockerfiles' default base (an exact
# python:3.11.x-slim-bookworm tag; docs/install.md, "Pinned versions").
#
#   .ci/base-image.sh            prints the image's name, building and importing it when missing
#
# The root file system (Debian bookworm, minbase, python3 + python3-venv + ca-certificates) is
# made by mmdebstrap into a tarball cached in $KRE_IMAGE_CACHE (default
# /var/cache/kube-resource-enforcer) under a name that hashes every input below; it is imported
# with `podman import`. Delete the tarball (or change an input) to take newer packages. Run as
# root, with podman and mmdebstrap (.ci/system-deps.sh installs them). See docs/testing.md.
set -euo pipefail

SUITE=bookworm
VARIANT=minbase
PACKAGES=python3,python3-venv,ca-certificates
# The Python release the base must have: Debian 12 ships 3.11.2 for its whole life (with
# Debian's security fixes, as 3.11.2-6+deb12uN). A base with another one is refused.
PYTHON_VERSION=3.11.2
# DEBIAN_SNAPSHOT=20251101T000000Z pins every package to the archive as it was then
# (snapshot.debian.org); unset, the current bookworm packages are taken.
if [ -n "${DEBIAN_SNAPSHOT:-}" ]; then
  MIRROR=${DEBIAN_MIRROR:-http://snapshot.debian.org/archive/debian/$DEBIAN_SNAPSHOT}
  SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://snapshot.debian.org/archive/debian-security/$DEBIAN_SNAPSHOT}
else
  MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
fi
CACHE=${KRE_IMAGE_CACHE:-/var/cache/kube-resource-enforcer}
SOURCES=(
  "deb $MIRROR $SUITE main"
  "deb $MIRROR $SUITE-updates main"
  "deb $SECURITY_MIRROR $SUITE-security main"
)
# Documentation and translations left out; the packages' copyright files are kept.
DPKG_OPTS=(
  "path-exclude=/usr/share/man/*"
  "path-exclude=/usr/share/info/*"
  "path-exclude=/usr/share/locale/*"
  "path-exclude=/usr/share/doc/*"
  "path-include=/usr/share/doc/*/copyright"
)
FORMAT=1  # raise when the recipe changes in a way the inputs above do not show

key=$(printf '%s\n' "$FORMAT" "$SUITE" "$VARIANT" "$PACKAGES" "$(uname -m)" \
  "${SOURCES[@]}" "${DPKG_OPTS[@]}" | sha256sum | cut -c1-16)
tarball="$CACHE/debian-$SUITE-python-$key.tar"
image="localhost/kube-resource-enforcer/base:$SUITE-$key"

missing() {
  echo "base-image: $1 is missing; .ci/system-deps.sh installs it (as root)" >&2
  exit 1
}
command -v podman >/dev/null || missing podman

if ! podman image exists "$image"; then
  if [ ! -s "$tarball" ]; then
    command -v mmdebstrap >/dev/null || missing mmdebstrap
    mkdir -p "$CACHE"
    tmp="$tarball.partial.$$"
    trap 'rm -f "$tmp"' EXIT
    dpkgopts=()
    for opt in "${DPKG_OPTS[@]}"; do dpkgopts+=("--dpkgopt=$opt"); done
    echo "base-image: building $tarball with mmdebstrap" >&2
    aptopts=('APT::Install-Recommends "false"')
    # A snapshot's Release files are past their Valid-Until: expected, not an attack.
    [ -n "${DEBIAN_SNAPSHOT:-}" ] && aptopts+=('Acquire::Check-Valid-Until "false"')
    mmdebstrap --quiet --mode=auto --format=tar --variant="$VARIANT" \
      --include="$PACKAGES" \
      "${aptopts[@]/#/--aptopt=}" \
      "${dpkgopts[@]}" \
      "$SUITE" "$tmp" "${SOURCES[@]}" >&2
    mv "$tmp" "$tarball"
  fi
  # The exact package versions in the base, kept beside the tarball.
  tar -xOf "$tarball" ./var/lib/dpkg/status \
    | awk '/^Package: /{p=$2} /^Version: /{print p "=" $2}' | sort >"$tarball.versions"
  python_deb=$(grep '^python3.11-minimal=' "$tarball.versions" | cut -d= -f2)
  case "$python_deb" in
    "$PYTHON_VERSION"-*) ;;
    *)
      echo "base-image: $tarball has python3.11 ${python_deb:-(none)}, not $PYTHON_VERSION;" \
        "bump PYTHON_VERSION in .ci/base-image.sh (docs/install.md, \"Pinned versions\")" >&2
      exit 1
      ;;
  esac
  echo "base-image: importing $tarball as $image (python3.11 $python_deb)" >&2
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$image" >/dev/null
fi
echo "$image"
