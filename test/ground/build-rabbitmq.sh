#!/usr/bin/env bash
# Builds the test ground's second broker, RabbitMQ 4 (Debian 13's
# rabbitmq-server with its Erlang), into an ignored cache folder, once:
#
#   .cache/rabbitmq/debian-<suite>/root   a debootstrap chroot (minbase + rabbitmq-server)
#
# The machine's own RabbitMQ stays what it is; this one runs beside it from the
# chroot (test/ground/rabbitmq-node.ts) with its own ports, node name and epmd.
# Debian's package, not a tarball: the only registries here are Debian's, npm's
# and Go's. Needs root (debootstrap, chroot); about a minute and 370 MB.
#
# Usage: build-rabbitmq.sh [--force]   (prints the chroot folder on stdout)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=versions.sh
. "$here/versions.sh"

cache="${JOBFLEET_CACHE_DIR:-$root/.cache}"
out="$cache/rabbitmq/debian-$RABBITMQ4_DEBIAN_SUITE"
log() { echo "[rabbitmq] $*" >&2; }

if [ "${1:-}" != "--force" ] && [ -f "$out/complete" ]; then echo "$out/root"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "building the RabbitMQ 4 chroot needs root (debootstrap)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap (Debian package)"
  install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null; }
  install || { apt-get update >/dev/null && install; }
fi

start=$(date +%s)
rm -rf "$out"
mkdir -p "$out"
log "debootstrap $RABBITMQ4_DEBIAN_SUITE (minbase + rabbitmq-server) into $out/root"
debootstrap --variant=minbase --include=rabbitmq-server "$RABBITMQ4_DEBIAN_SUITE" "$out/root" \
  "$RABBITMQ4_DEBIAN_MIRROR" >"$out/debootstrap.log" 2>&1 ||
  { tail -20 "$out/debootstrap.log" >&2; exit 1; }
# A node named name@localhost asks the resolver for localhost (epmd): without
# this file (sid's debootstrap writes none) it stops with "nxdomain".
if ! grep -qs '^127\.0\.0\.1[[:space:]].*localhost' "$out/root/etc/hosts"; then
  printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >>"$out/root/etc/hosts"
fi
version=$(chroot "$out/root" dpkg-query -W -f '${Version}' rabbitmq-server)
case "$version" in
  "$RABBITMQ4_EXPECTED".*) ;;
  *)
    echo "rabbitmq-server $version in Debian $RABBITMQ4_DEBIAN_SUITE, expected $RABBITMQ4_EXPECTED.x:" \
      "the suite moved on; set RABBITMQ4_EXPECTED in test/ground/versions.env once the suites pass on it" >&2
    exit 1
    ;;
esac
# The data, logs and cookie of each node live under /run/<node>, made per start.
echo "$version" >"$out/complete"
log "rabbitmq-server $version ready in $(( $(date +%s) - start ))s"
echo "$out/root"
