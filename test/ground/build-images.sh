#!/usr/bin/env bash
# `make images`: builds the operator image and the example worker image from
# the Dockerfile — the recipe a user runs with `docker build` — with buildah
# (Debian's package: no daemon, no Docker engine), prints each image's digest
# and size, and pushes them when PUSH=1.
#
#   REGISTRY, TAG    name them: $REGISTRY/jobfleet-operator:$TAG, $REGISTRY/jobfleet-example-worker:$TAG
#   PUSH=1           push both (credentials: `buildah login`, or REGISTRY_AUTH_FILE, a file as
#                    `docker login` writes; a private CA: REGISTRY_CERT_DIR, a folder with its ca.crt)
#   BASE_IMAGE       the Dockerfile's base (default: the official node:24-bookworm-slim). Where it
#                    cannot be pulled (no route to Docker Hub, as on the test machines), the same
#                    base is built once from Debian's packages and the Node in .node-version
#                    (build-base-image.sh), so the images tested are the images shipped.
#
# The machine's npm settings (registry, CA) reach the build's `npm ci` as build secrets, never as a
# layer. Storage: .cache/images/storage (buildah's own, not the system's). Needs root.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache="${JOBFLEET_CACHE_DIR:-$root/.cache}"
REGISTRY="${REGISTRY:-localhost:5000}"
TAG="${TAG:-dev}"
log() { echo "[images] $*" >&2; }

if ! command -v buildah >/dev/null; then
  log "installing buildah (Debian package)"
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends buildah >/dev/null; }
  install || { apt-get update >/dev/null && install; }
fi
# shellcheck source=buildah.sh
. "$here/buildah.sh"

official=docker.io/library/node:24-bookworm-slim
if [ -z "${BASE_IMAGE:-}" ]; then
  if bah inspect --type image "$official" >/dev/null 2>&1 ||
    timeout 60 "${bah[@]}" pull --quiet "$official" >/dev/null 2>&1; then
    BASE_IMAGE=$official
  else
    log "$official cannot be pulled here: using the ground's equivalent base"
    BASE_IMAGE=$(bash "$here/build-base-image.sh")
  fi
fi
log "base image: $BASE_IMAGE"

# npm's registry and CA, as the machine's npm sees them, for the build stage alone.
secrets=$(mktemp -d)
trap 'rm -rf "$secrets"' EXIT
{
  echo "registry=$(npm config get registry)"
  # npm's cafile, else the extra CAs Node is told to trust (what npm here runs with)
  ca=$(npm config get cafile 2>/dev/null || true)
  { [ -n "$ca" ] && [ "$ca" != null ] && [ -f "$ca" ]; } || ca=${NODE_EXTRA_CA_CERTS:-}
  if [ -n "$ca" ] && [ -f "$ca" ]; then
    cp "$ca" "$secrets/npm-ca.pem"
    echo "cafile=/run/secrets/npm-ca"
  fi
} >"$secrets/npmrc"
[ -f "$secrets/npm-ca.pem" ] || : >"$secrets/npm-ca.pem"

for target in operator example-worker; do
  ref="$REGISTRY/jobfleet-$target:$TAG"
  log "building $ref (target $target)"
  # chroot isolation: RUN steps need no OCI runtime (crun refuses this machine's hybrid cgroups)
  bah bud --layers --pull=never --network=host --isolation=chroot --target "$target" \
    --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --secret "id=npmrc,src=$secrets/npmrc" --secret "id=npm-ca,src=$secrets/npm-ca.pem" \
    -t "$ref" -f "$root/Dockerfile" "$root" >&2
  size=$(bah images --format '{{.Size}}' "$ref" | sed -n 1p)
  if [ "${PUSH:-}" = 1 ]; then
    push=(push --digestfile "$secrets/digest")
    [ -n "${REGISTRY_CERT_DIR:-}" ] && push+=(--cert-dir "$REGISTRY_CERT_DIR")
    bah "${push[@]}" "$ref" "docker://$ref" >&2
    echo "$ref pushed: digest $(cat "$secrets/digest"), size $size"
  else
    echo "$ref built: digest $(bah images --format '{{.Digest}}' "$ref" | sed -n 1p), size $size"
  fi
done
