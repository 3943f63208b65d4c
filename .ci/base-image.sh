#!/usr/bin/env bash
# A base image for Dockerfile.webhook and Dockerfile.enforcer made from Debian's own packages,
# for building and testing the images on a machine that reaches Debian's archive and PyPI but no
# container registry. Production builds keep the Dockerfiles' default base (python:3.11-slim).
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
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
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
    mmdebstrap --quiet --mode=auto --format=tar --variant="$VARIANT" \
      --include="$PACKAGES" \
      --aptopt='APT::Install-Recommends "false"' \
      "${dpkgopts[@]}" \
      "$SUITE" "$tmp" "${SOURCES[@]}" >&2
    mv "$tmp" "$tarball"
  fi
  echo "base-image: importing $tarball as $image" >&2
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$image" >/dev/null
fi
echo "$image"
