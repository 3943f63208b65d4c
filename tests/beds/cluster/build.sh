#!/usr/bin/env bash
# Builds what the single-node cluster test bed runs, each pinned and cached by version (test
# tooling only: never in the wheel or the images):
#   - Kubernetes (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl) from
#     k8s.io/kubernetes as a Go module (kubernetes/go.mod: the release and one replace line per
#     staging module), one `go build` for all five so shared packages compile once;
#   - etcd from go.etcd.io/etcd/server/v3 (etcd/go.mod), through a main of our own;
#   - containerd 2.x, its runc shim and ctr: tests/beds/runtimes/containerd2.sh;
#   - the pod sandbox's pause program, built static with gcc from Kubernetes' own
#     build/pause/linux/pause.c (in the module cache of the pinned release).
# Idempotent: a component whose cached files match its pins (go.mod, go.sum, flags) is not built
# again; concurrent runs wait for each other (flock). Prints one NAME=FOLDER line per component.
#   KRE_BEDS_CACHE   cache root (default /var/cache/kube-resource-enforcer)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${KRE_BEDS_CACHE:-/var/cache/kube-resource-enforcer}"
command -v go >/dev/null || { echo "cluster build: no go command on PATH; Go 1.26 is needed" >&2; exit 1; }
mkdir -p "$cache"
export GOFLAGS=-mod=readonly

# The pins of a module and the flags it is built with, as one hash: the stamp of a build.
pins() { cat "$1/go.mod" "$1/go.sum"; printf '%s\n' "${@:2}"; }
stamp_of() { pins "$@" | sha256sum | cut -c1-16; }

# build_module NAME MODULE_DIR DEST LDFLAGS PROGRAM... : go build the PROGRAMs (full package
# paths; binaries named after their last element) of MODULE_DIR into DEST/bin, once.
build_module() {
  local name=$1 module=$2 dest=$3 ldflags=$4; shift 4
  local stamp; stamp=$(stamp_of "$module" "$ldflags" "$@")
  local done_file="$dest/.stamp"
  if [ "$(cat "$done_file" 2>/dev/null)" = "$stamp" ]; then return 0; fi
  exec 9>"$cache/.$name.lock"
  flock 9
  if [ "$(cat "$done_file" 2>/dev/null)" = "$stamp" ]; then exec 9>&-; return 0; fi
  local work; work=$(mktemp -d "$cache/.$name-build.XXXXXX")
  cp "$module"/go.mod "$module"/go.sum "$module"/*.go "$work/"
  echo "cluster build: building $name (go build of $*) ..." >&2
  local start; start=$(date +%s)
  if ! (cd "$work" && go build -trimpath -ldflags "$ldflags" -o "$work/bin/" "$@") >&2; then
    rm -rf "$work"; exec 9>&-
    echo "cluster build: go build of $name failed" >&2; return 1
  fi
  rm -rf "$dest"; mkdir -p "$dest"
  mv "$work/bin" "$dest/bin"; rm -rf "$work"
  echo "$stamp" > "$done_file"
  echo "cluster build: built $name in $(( $(date +%s) - start )) s" >&2
  exec 9>&-
}

# --- Kubernetes -----------------------------------------------------------------------------
kmod="$here/kubernetes"
kver=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$kmod/go.mod")
[ -n "$kver" ] || { echo "cluster build: no k8s.io/kubernetes require line in $kmod/go.mod" >&2; exit 1; }
kminor=${kver#v*.}; kminor=${kminor%%.*}
kldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kldflags+=" -X $pkg.gitVersion=$kver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kminor"
  kldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
kdest="$cache/kubernetes-$kver"
build_module "kubernetes-$kver" "$kmod" "$kdest" "$kldflags" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet

# --- etcd -----------------------------------------------------------------------------------
emod="$here/etcd"
ever=$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$emod/go.mod")
[ -n "$ever" ] || { echo "cluster build: no go.etcd.io/etcd/server/v3 require line in $emod/go.mod" >&2; exit 1; }
edest="$cache/etcd-$ever"
build_module "etcd-$ever" "$emod" "$edest" "-s -w" kre.local/beds/etcd

# --- pause (static, from the pinned release's own source) --------------------------------------
pdest="$cache/pause-$kver"
if [ ! -x "$pdest/bin/pause" ]; then
  src=$(cd "$kmod" && go list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null)/build/pause/linux/pause.c
  if [ ! -f "$src" ]; then
    (cd "$kmod" && go mod download k8s.io/kubernetes) >&2
    src=$(cd "$kmod" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  fi
  command -v gcc >/dev/null || { echo "cluster build: gcc is needed to build pause ($src)" >&2; exit 1; }
  mkdir -p "$pdest/bin"
  gcc -Os -Wall -static -DVERSION="$kver-kre" -o "$pdest/bin/pause.tmp" "$src" >&2
  mv "$pdest/bin/pause.tmp" "$pdest/bin/pause"
fi

# --- containerd 2.x -------------------------------------------------------------------------
cbin=$("$here/../runtimes/containerd2.sh" | tail -n1)

echo "kubernetes=$kdest/bin"
echo "etcd=$edest/bin"
echo "pause=$pdest/bin"
echo "containerd=$cbin"
echo "kubernetes_version=$kver"
