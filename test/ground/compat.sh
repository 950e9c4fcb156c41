#!/usr/bin/env bash
# `make compat`: the older lines users still run, against this commit, not in
# every CI run (about an hour, most of it the first time's builds).
#
#   Kubernetes COMPAT_KUBE_VERSION (1.35.x): the kube-facing suites, project
#     `integration` (the machine's broker) and `e2e-node` (a real node of that
#     version: its kubelet and kube-proxy), on a control plane of that version;
#   RabbitMQ COMPAT_RABBITMQ4_DEBIAN_SUITE's (Debian 13: 4.0): the broker-facing
#     project `integration-rabbitmq4`, quorum queues, on the pinned Kubernetes.
#
# Each older part is built once into .cache/ beside the pinned one (through
# GROUND_<KEY>, test/ground/versions.sh), and each run's vitest report is kept
# in .cache/compat/. Prints the rows of docs/compatibility.md's matrix.
#
# Usage: compat.sh [kube|rabbitmq]   (both when not named)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
# shellcheck source=versions.sh
. "$here/versions.sh"

commit=$(git rev-parse --short HEAD)
day=$(date -u +%Y-%m-%d)
reports="$root/.cache/compat"
mkdir -p "$reports"
rows=()
rc=0

# run NAME ENV… -- PROJECT…: one vitest run under the overrides; its counts become a row.
run() {
  local name=$1 cell=$2
  shift 2
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local projects=() p
  for p in "$@"; do projects+=(--project "$p"); done
  local report="$reports/$name-$commit.json"
  echo "== compat $name: ${env[*]} vitest ${projects[*]}" >&2
  env "${env[@]}" npx vitest run "${projects[@]}" --reporter=default --reporter=json \
    --outputFile.json="$report" >&2
  local status=$?
  [ $status = 0 ] || rc=1
  local counts
  # summary.mjs exits 1 when a test failed, after printing the counts
  counts=$(node .ci/summary.mjs "$report" 2>/dev/null)
  [ -n "$counts" ] || counts="no report"
  rows+=("| $cell | $day | $commit | $* | $counts |")
}

if [ "${1:-kube}" = kube ]; then
  kube=(GROUND_KUBE_VERSION="$COMPAT_KUBE_VERSION")
  # e2e-node's ground runs the workers against the ground's RabbitMQ 4 (the pinned one)
  env "${kube[@]}" make --no-print-directory control-plane real-node rabbitmq4 >&2 || exit 1
  run "kube-$COMPAT_KUBE_VERSION" "Kubernetes $COMPAT_KUBE_VERSION" "${kube[@]}" -- integration e2e-node
fi
if [ "${1:-rabbitmq}" = rabbitmq ]; then
  rabbit=(GROUND_RABBITMQ4_DEBIAN_SUITE="$COMPAT_RABBITMQ4_DEBIAN_SUITE"
    GROUND_RABBITMQ4_EXPECTED="$COMPAT_RABBITMQ4_EXPECTED")
  env "${rabbit[@]}" make --no-print-directory rabbitmq4 >&2 || exit 1
  version=$(cat ".cache/rabbitmq/debian-$COMPAT_RABBITMQ4_DEBIAN_SUITE/complete")
  run "rabbitmq-$COMPAT_RABBITMQ4_DEBIAN_SUITE" "RabbitMQ $version" "${rabbit[@]}" -- integration-rabbitmq4
fi

echo "| cell | tested | commit | projects | result |"
echo "| ---- | ------ | ------ | -------- | ------ |"
printf '%s\n' "${rows[@]}"
exit $rc
