#!/usr/bin/env bash
# Builds the test ground's Kubernetes control plane (envtest layout) and helm
# from the Go module proxy into an ignored cache folder, once.
#
#   .cache/kube/<KUBE_VERSION>/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,kwok,helm,krew,helm-docs}
#
# Versions come from versions.env (the one place they are pinned). No
# Kubernetes source is vendored: a wrapper module requires k8s.io/kubernetes
# and maps each staging module k8s.io/X (pinned upstream at v0.0.0) to the
# matching published k8s.io/X v0.N.M.
#
# Usage: build-control-plane.sh [--force]   (prints the folder on stdout)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
export PATH="$PATH:/usr/local/go/bin"
export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

cache="${JOBFLEET_CACHE_DIR:-$root/.cache}"
out="$cache/kube/$KUBE_VERSION"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm krew helm-docs)

complete() { for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done; }
if [ "${1:-}" != "--force" ] && complete; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "go not found: install Go 1.25+ (expected at /usr/local/go/bin)" >&2; exit 1; }
mkdir -p "$out" "$cache/build"
log() { echo "[control-plane] $*" >&2; }
start=$(date +%s)

# shellcheck source=kube-ldflags.sh
. "$here/kube-ldflags.sh"

# --- kube-apiserver, kube-controller-manager, kube-scheduler -----------------
kube="$cache/build/kube-$KUBE_VERSION"
mkdir -p "$kube"
if [ ! -f "$kube/go.mod" ]; then
  log "resolving k8s.io/kubernetes v$KUBE_VERSION"
  upstream_mod=$(cd "$kube" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$upstream_mod")
  {
    echo "module jobfleet.dev/ground/kube"
    echo
    echo "go 1.25.0"
    echo
    echo "require k8s.io/kubernetes v$KUBE_VERSION"
    echo
    echo "replace ("
    for m in $staging; do echo "	$m => $m v0.$kube_minor.${KUBE_VERSION##*.}"; done
    echo ")"
  } >"$kube/go.mod"
fi
cat >"$kube/tools.go" <<'EOF'
//go:build tools

// Never compiled: it names the commands so that `go mod tidy` keeps their
// dependency graph.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
(cd "$kube" && go mod tidy)
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  log "building $cmd"
  (cd "$kube" && go build -trimpath -ldflags "$kube_ldflags" -o "$out/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done

# --- etcd ----------------------------------------------------------------
etcd="$cache/build/etcd-$ETCD_VERSION"
mkdir -p "$etcd"
if [ ! -f "$etcd/go.sum" ]; then
  log "resolving etcd v$ETCD_VERSION"
  cp "$here/etcd/main.go" "$etcd/main.go"
  printf 'module jobfleet.dev/ground/etcd\n\ngo 1.25.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" >"$etcd/go.mod"
  (cd "$etcd" && go mod tidy)
fi
log "building etcd"
(cd "$etcd" && go build -trimpath -o "$out/etcd" .)

# --- kwok and helm: no replace directives, so plain `go install` ----------
log "building kwok v$KWOK_VERSION"
GOBIN="$out" go install -trimpath "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
log "building helm v$HELM_VERSION"
GOBIN="$out" go install -trimpath \
  -ldflags "-X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
# krew: the plugin test installs the release archive with it, as users would
log "building krew v$KREW_VERSION"
GOBIN="$out" go install -trimpath "sigs.k8s.io/krew/cmd/krew@v$KREW_VERSION"
# helm-docs: the chart's README is its output (`make chart-docs`; a test checks it is current)
log "building helm-docs v$HELM_DOCS_VERSION"
GOBIN="$out" go install -trimpath "github.com/norwoodj/helm-docs/cmd/helm-docs@v$HELM_DOCS_VERSION"

log "done in $(( $(date +%s) - start ))s"
echo "$out"
