#!/usr/bin/env bash
# Removes everything a real node of the test ground (real-node.ts) leaves on
# this machine: its daemons, every container (all in the kubepods cgroups),
# the mounts under its folders (overlay rootfs, volumes, network namespaces),
# its bridge and the service range's route; and puts back the iptables rules
# and sysctls as they were before the node started (the kubelet and
# kube-proxy add chains of their own). Run before a node starts (a killed
# run's leftovers), after it stops, and by a watcher when the test process
# dies without its teardown; --save records the machine's state first.
#
#   node-cleanup.sh KUBE_PROXY_BIN [--save | --watch PID]
set -u
kube_proxy=${1:?the kube-proxy binary}
prefix="${TMPDIR:-/tmp}/jobfleet-node-"
saved="${prefix}saved"
bridge=jobfleet0
sysctls=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables)
if [ "${2:-}" = --save ]; then
  mkdir -p "$saved"
  iptables-save >"$saved/iptables" && ip6tables-save >"$saved/ip6tables" || exit 1
  for k in "${sysctls[@]}"; do sysctl -n "$k" >"$saved/$k" 2>/dev/null || rm -f "$saved/$k"; done
  exit 0
fi
if [ "${2:-}" = --watch ]; then
  trap 'exit 0' TERM
  while kill -0 "$3" 2>/dev/null; do sleep 1; done
fi

# The node's daemons (kubelet, kube-proxy, containerd, its shims, the registry): their command
# lines name the node's folder. The kubelet first, so that nothing restarts a container.
kill_named() {
  for p in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
    case "$cmd" in *"$prefix"*"$1"* | *"$1"*"$prefix"*) kill -9 "${p#/proc/}" 2>/dev/null ;; esac
  done
}
kill_named kubelet
kill_named ''

# Every container's processes, pause included: all live in the kubepods cgroups.
for _ in 1 2 3; do
  pids=$(for d in /sys/fs/cgroup/*/kubepods; do
    [ -d "$d" ] && find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -u)
  [ -z "$pids" ] && break
  # shellcheck disable=SC2086
  kill -9 $pids 2>/dev/null
  sleep 0.5
done
for d in /sys/fs/cgroup/*/kubepods; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
done

# Mounts under the node's folders, deepest first.
awk '{print $5}' /proc/self/mountinfo | grep "^$prefix" | sort -r | xargs -r -n1 umount -l 2>/dev/null

ip link del "$bridge" 2>/dev/null
ip route del unreachable 10.0.0.0/24 2>/dev/null
if [ -f "$saved/iptables" ]; then
  iptables-restore <"$saved/iptables"
  ip6tables-restore <"$saved/ip6tables"
  for k in "${sysctls[@]}"; do [ -f "$saved/$k" ] && sysctl -q -w "$k=$(cat "$saved/$k")"; done
else
  # nothing saved (a node that died before it saved): remove the rules known to be the node's
  while iptables -D FORWARD -i "$bridge" ! -o "$bridge" -j DROP 2>/dev/null; do :; done
  [ -x "$kube_proxy" ] && "$kube_proxy" --cleanup >/dev/null 2>&1
fi
rm -rf "$prefix"*
exit 0
