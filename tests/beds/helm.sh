#!/usr/bin/env bash
# Builds the helm command that the chart tests run (helm lint, helm template, the install on the
# real cluster) from its Go module, pinned by tests/beds/helm/go.{mod,sum}, into one cached
# folder. Test tooling only (never in the wheel or the images). Idempotent: does nothing when the
# cached binary matches the pins. Prints the bin folder on success; exits non-zero when the build
# fails (the Makefile's build step calls it, so CI fails with it).
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/helm"
version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" {print $3}' "$module/go.mod")
[ -n "$version" ] || { echo "helm bed: no helm.sh/helm/v4 require line in $module/go.mod" >&2; exit 1; }
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
dest="$cache/helm-${version#v}"
bin="$dest/bin"
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=${version} -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
stamp=$(cat "$module/go.mod" "$module/go.sum" "$module/tools.go" <(printf '%s\n' "$ldflags") | sha256sum | cut -c1-16)

built() { [ -x "$bin/helm" ] && [ "$(cat "$dest/.stamp" 2>/dev/null)" = "$stamp" ]; }

if built; then echo "$bin"; exit 0; fi
command -v go >/dev/null || { echo "helm bed: no go command on PATH; Go 1.26 is needed to build helm $version" >&2; exit 1; }
mkdir -p "$cache"
exec 9>"$cache/.helm.lock"
flock 9
if built; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.helm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$module/go.mod" "$module/go.sum" "$module/tools.go" "$work/"
start=$(date +%s)
(cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" \
  -o "$work/bin/" helm.sh/helm/v4/cmd/helm) >&2
rm -rf "$dest"
mkdir -p "$dest"
mv "$work/bin" "$bin"
echo "$stamp" > "$dest/.stamp"
echo "helm bed: built helm $version in $(( $(date +%s) - start )) s" >&2
"$bin/helm" version --short 2>/dev/null | grep -q "^${version}" \
  || { echo "helm bed: $bin/helm does not answer with $version" >&2; exit 1; }
echo "$bin"
