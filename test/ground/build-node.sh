#!/usr/bin/env bash
# Builds the real node of the test ground from the Go module proxy into an
# ignored cache folder, once:
#
#   .cache/real-node/<stamp>/bin/{kubelet,kube-proxy,containerd,containerd-shim-runc-v2,ctr,runc,registry,pause}
#   .cache/real-node/<stamp>/cni/{bridge,host-local,loopback}
#   .cache/real-node/<stamp>/pause.tar (the sandbox image, for `ctr images import`)
#
# kubelet and kube-proxy come from the control plane's own wrapper module (same
# Kubernetes version, same go.sum: run after build-control-plane.sh); runc is
# built with cgo and libseccomp (restricted pods ask for RuntimeDefault);
# pause is Kubernetes' own pause.c from the same module, linked statically.
# Versions come from versions.env. Needs gcc and libseccomp-dev (Debian).
#
# Usage: build-node.sh [--force]   (prints the folder on stdout)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
export PATH="$PATH:/usr/local/go/bin"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

cache="${JOBFLEET_CACHE_DIR:-$root/.cache}"
stamp="k$KUBE_VERSION-containerd$CONTAINERD_VERSION-runc$RUNC_VERSION-cni$CNI_PLUGINS_VERSION-registry$REGISTRY_VERSION"
out="$cache/real-node/$stamp"
bins=(bin/kubelet bin/kube-proxy bin/containerd bin/containerd-shim-runc-v2 bin/ctr bin/runc bin/registry bin/pause
  cni/bridge cni/host-local cni/loopback)

complete() { for b in "${bins[@]}" pause.tar; do [ -e "$out/$b" ] || return 1; done; }
if [ "${1:-}" != "--force" ] && complete; then echo "$out"; exit 0; fi
log() { echo "[real-node] $*" >&2; }
start=$(date +%s)
lap=$start
# each part's own time, for the cold build's figures
took() { local now; now=$(date +%s); log "$1 built in $(( now - lap ))s"; lap=$now; }

# Debian packages the build and the node need (a fresh machine lacks them).
need=()
[ -f /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v iptables >/dev/null || need+=(iptables)
command -v conntrack >/dev/null || need+=(conntrack)
command -v buildah >/dev/null || need+=(buildah)
command -v htpasswd >/dev/null || need+=(apache2-utils)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]} (Debian packages)"
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >/dev/null; }
  install || { apt-get update >/dev/null && install; }
fi

# the control plane first: its wrapper module is where kubelet and kube-proxy come from
bash "$here/build-control-plane.sh" >/dev/null
mkdir -p "$out/bin" "$out/cni"
lap=$(date +%s)

# --- kubelet, kube-proxy: the control plane's wrapper module ----------------
# shellcheck source=kube-ldflags.sh
. "$here/kube-ldflags.sh"
kube="$cache/build/kube-$KUBE_VERSION"
cat >"$kube/tools_node.go" <<'EOF'
//go:build tools

// Never compiled: the node's commands, for `go mod tidy` (see tools.go).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
(cd "$kube" && go mod tidy)
for cmd in kubelet kube-proxy; do
  log "building $cmd v$KUBE_VERSION"
  (cd "$kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$kube_ldflags" -o "$out/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd")
done

took "kubelet and kube-proxy"

# pause: the sandbox's init, from the same Kubernetes module (nothing can be pulled here)
pause_c=$(cd "$kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
log "building pause from $pause_c"
gcc -Os -Wall -static -DVERSION="v$KUBE_VERSION-jobfleet" -o "$out/bin/pause" "$pause_c"
# as an image archive for `ctr images import` (containerd's CRI pins it as the sandbox image)
# shellcheck source=buildah.sh
. "$here/buildah.sh"
pause_ref="jobfleet.test/pause:$KUBE_VERSION"
c=$(bah from scratch)
bah copy "$c" "$out/bin/pause" /pause >/dev/null
bah config --entrypoint '["/pause"]' --user 65535:65535 "$c"
bah commit --rm "$c" "$pause_ref" >/dev/null
rm -f "$out/pause.tar"
bah push "$pause_ref" "docker-archive:$out/pause.tar:$pause_ref" >/dev/null 2>&1
took "the pause image"

# --- containerd and runc ----------------------------------------------------
log "building containerd v$CONTAINERD_VERSION"
for cmd in containerd containerd-shim-runc-v2 ctr; do
  CGO_ENABLED=0 GOBIN="$out/bin" go install -trimpath -tags "urfave_cli_no_docs no_btrfs" \
    -ldflags "-X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/$cmd@v$CONTAINERD_VERSION"
done
log "building runc v$RUNC_VERSION (cgo, seccomp)"
CGO_ENABLED=1 GOBIN="$out/bin" go install -trimpath -tags "seccomp urfave_cli_no_docs" \
  -ldflags "-X main.version=$RUNC_VERSION" "github.com/opencontainers/runc@v$RUNC_VERSION"
took "containerd and runc"

# --- CNI plugins, the registry ----------------------------------------------
log "building CNI plugins v$CNI_PLUGINS_VERSION"
for p in main/bridge main/loopback ipam/host-local; do
  CGO_ENABLED=0 GOBIN="$out/cni" go install -trimpath \
    "github.com/containernetworking/plugins/plugins/$p@v$CNI_PLUGINS_VERSION"
done
took "the CNI plugins"
log "building the distribution registry v$REGISTRY_VERSION"
CGO_ENABLED=0 GOBIN="$out/bin" go install -trimpath \
  "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION"
took "the registry"

complete || { echo "build-node.sh: missing after the build: $(for b in "${bins[@]}"; do [ -x "$out/$b" ] || printf '%s ' "$b"; done)" >&2; exit 1; }
log "done in $(( $(date +%s) - start ))s"
echo "$out"
