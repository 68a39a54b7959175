#!/usr/bin/env bash
# Multi-node MPI training on ONE Linux machine: "hosts" made of network namespaces.
#
#   scripts/multihost.sh [--hosts H] [--np-per-host N] [--rate R] [--keep] -- COMMAND ARGS...
#
#   sudo scripts/multihost.sh --np-per-host 2 -- build/apps/gradus/gradus train --dist ddp --model cnn
#   sudo scripts/multihost.sh --hosts 4 --rate 100mbit -- build/apps/gradus/gradus train --dist ddp
#
# What it does (as root):
#  * creates H network namespaces (default 2), gradus-hI-PID with address 10.77.0.(I+1)/24, each
#    cabled by a veth pair to one Linux bridge (a switch) in a namespace of its own,
#    gradus-sw-PID; loopback up everywhere;
#  * with --rate R (tc syntax: 100mbit, 1gbit, ...) shapes both ends of every host's cable with a
#    tbf qdisc, so each host sends and receives at most R (netem is not needed, tbf is in every
#    kernel);
#  * runs ONE mpirun job over the hosts, N ranks per host, each rank running COMMAND ARGS...
#    mpirun itself runs in namespace 0. OpenMPI starts its daemon (orted) on a remote host with an
#    "rsh agent", normally ssh: `ssh HOST orted ...`. We have no sshd in the namespaces, so a small
#    agent script stands in for ssh: called as `agent HOST CMD...`, it maps the host's address to
#    its namespace and runs CMD there with `ip netns exec NS sh -c "CMD..."` (ssh, too, hands the
#    remote command to a shell). Host 10.77.0.1 is mpirun's own, so its ranks start directly.
#  * when the job ends, prints the bytes each host sent and received on its cable (the kernel's
#    counters of its veth): the traffic between hosts, measured, not estimated.
#  * hostnames: each host also gets its own UTS namespace and hostname (= its namespace's name).
#    OpenMPI tells nodes apart by hostname: with one shared name, MPI_Comm_split_type(SHARED) (how
#    gradus finds its local rank and GPU) gave mismatched groups and ranks crashed in ob1.
#  * forces every byte between ranks over the veth, as between real machines: `--mca pml ob1`
#    with `--mca btl tcp,self` (no shared-memory btl "vader", no UCX, which would bypass TCP and
#    the shaping since both "hosts" share one kernel), and the TCP btl and mpirun's out-of-band
#    channel restricted to the veth subnet 10.77.0.0/24. plm_rsh_no_tree_spawn: mpirun launches
#    every daemon itself (no daemon-to-daemon ssh). --bind-to none: both "hosts" share the CPUs,
#    and each would otherwise pin its first rank to core 0.
#  * always cleans up on exit, failure, Ctrl-C or SIGTERM: kills what is still running in the
#    namespaces, deletes them (which deletes the veth pairs and the bridge) and the temp files.
#    --keep skips this (for debugging; delete later with `ip netns del NAME` for each of them).
#
# OMP_NUM_THREADS and every GRADUS_* variable set here are passed to the ranks (mpirun -x).
# Exit status: mpirun's (the first failing rank's), 130/143 when interrupted, 2 on bad usage.
set -euo pipefail

usage() {
  sed -n '4,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  echo "options: --hosts H (2-16, default 2), --np-per-host N (default 1), --rate R (tbf rate," >&2
  echo "         e.g. 100mbit), --tcp-retries N (net.ipv4.tcp_retries2 on every host), --keep" >&2
  exit 2
}
die() {
  echo "multihost.sh: error: $*" >&2
  exit 2
}

hosts=2
np_per_host=1
rate=
keep=0
tcp_retries=
while [[ $# -gt 0 ]]; do
  case $1 in
    --hosts) [[ $# -ge 2 ]] || usage; hosts=$2; shift 2 ;;
    --np-per-host) [[ $# -ge 2 ]] || usage; np_per_host=$2; shift 2 ;;
    --rate) [[ $# -ge 2 ]] || usage; rate=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --tcp-retries) [[ $# -ge 2 ]] || usage; tcp_retries=$2; shift 2 ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) echo "multihost.sh: unknown option '$1' (the command goes after --)" >&2; usage ;;
  esac
done
[[ $# -gt 0 ]] || die "no COMMAND given (usage: scripts/multihost.sh [options] -- COMMAND ARGS...)"
[[ -z $tcp_retries || $tcp_retries =~ ^[0-9]+$ ]] || die "--tcp-retries must be a non-negative integer, not '$tcp_retries'"
[[ $np_per_host =~ ^[1-9][0-9]*$ ]] || die "--np-per-host must be a positive integer, not '$np_per_host'"
[[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 2 && hosts <= 16)) || die "--hosts must be an integer from 2 to 16, not '$hosts'"
[[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces, veth and tc need CAP_NET_ADMIN); try sudo"
command -v ip >/dev/null || die "'ip' (iproute2) not found"
command -v mpirun >/dev/null || die "'mpirun' (OpenMPI) not found"
command -v unshare >/dev/null || die "'unshare' (util-linux) not found"
[[ -z $rate ]] || command -v tc >/dev/null || die "--rate needs 'tc' (iproute2) but it is not found"

# Names unique per run (interface names: at most 15 characters).
sw=gradus-sw-$$ bridge=gmbr-$$ subnet=10.77.0.0/24
ns=() addr=() dev=() port=()
for ((i = 0; i < hosts; i++)); do
  ns+=("gradus-h$i-$$") addr+=("10.77.0.$((i + 1))") dev+=("gmh$i-$$") port+=("gmp$i-$$")
done
tmp=
mpirun_pid=

# shellcheck disable=SC2317  # (called from traps)
cleanup() {
  local rc=$?
  set +e
  trap - EXIT
  trap '' INT TERM  # a second Ctrl-C must not cut the cleanup short
  if [[ $keep -eq 1 ]]; then
    echo "multihost.sh: --keep: left namespaces ${ns[*]} $sw and $tmp" >&2
    exit "$rc"
  fi
  # A namespace (and its veth) only goes away when no process is left in it: end the stragglers
  # (orted, ranks) by id, politely first.
  local n pids
  for sig in TERM KILL; do
    pids=
    for n in "${ns[@]}"; do
      [[ -e /run/netns/$n ]] && pids+=" $(ip netns pids "$n" 2>/dev/null | tr '\n' ' ')"
    done
    [[ -n ${pids// /} ]] || break
    # shellcheck disable=SC2086
    kill -s "$sig" $pids 2>/dev/null || true
    [[ $sig == TERM ]] && sleep 1
  done
  for n in "${ns[@]}" "$sw"; do
    [[ -e /run/netns/$n ]] && ip netns del "$n" 2>/dev/null
  done
  [[ -n $tmp ]] && rm -rf "$tmp"
  exit "$rc"
}
# shellcheck disable=SC2317
on_signal() {  # Ctrl-C / SIGTERM: stop the job first, then clean up (the EXIT trap)
  local code=$1
  if [[ -n $mpirun_pid ]]; then
    kill -TERM "$mpirun_pid" 2>/dev/null || true
    wait "$mpirun_pid" 2>/dev/null || true
  fi
  exit "$code"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

# shape NS DEV: limit what DEV sends to --rate.
shape() {
  [[ -n $rate ]] || return 0
  # Token bucket: R on average; burst holds a few 64 KB GSO packets (a smaller one would drop
  # them); latency bounds the queue (rate x 50 ms) so TCP sees a realistic bottleneck.
  ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 50ms ||
    die "tc could not shape $2 with rate '$rate' (use tc units: 100mbit, 1gbit, 500kbit)"
}

# bytes NS DEV tx|rx: the kernel's byte counter of DEV.
bytes() {
  ip netns exec "$1" cat "/sys/class/net/$2/statistics/$3_bytes"
}

# --- the hosts and the switch --------------------------------------------------------------------
mkdir -p /run/netns  # `ip netns` keeps its namespaces here; some systems lack the directory
ip netns add "$sw"
ip -n "$sw" link add "$bridge" type bridge
ip -n "$sw" link set "$bridge" up
ip -n "$sw" link set lo up
for ((i = 0; i < hosts; i++)); do
  ip netns add "${ns[i]}"
  # The cable: dev[i] in the host, port[i] on the switch.
  ip link add "${dev[i]}" netns "${ns[i]}" type veth peer name "${port[i]}" netns "$sw"
  ip -n "$sw" link set "${port[i]}" master "$bridge"
  ip -n "$sw" link set "${port[i]}" up
  ip -n "${ns[i]}" addr add "${addr[i]}/24" dev "${dev[i]}"
  ip -n "${ns[i]}" link set lo up  # mpirun and orted talk to themselves over loopback
  ip -n "${ns[i]}" link set "${dev[i]}" up
  # How long the host's TCP retransmits unacknowledged data before it gives the connection up
  # (per network namespace; the kernel's default, 15, is about 15 minutes).
  [[ -z $tcp_retries ]] || ip netns exec "${ns[i]}" sysctl -qw net.ipv4.tcp_retries2="$tcp_retries"
  shape "${ns[i]}" "${dev[i]}"  # what the host sends
  shape "$sw" "${port[i]}"      # what it receives
done
if command -v ping >/dev/null; then
  for ((i = 1; i < hosts; i++)); do
    # A bridge port needs a moment to start forwarding.
    for _ in 1 2 3 4 5; do
      ip netns exec "${ns[0]}" ping -c 1 -W 1 "${addr[i]}" >/dev/null 2>&1 && break
    done
    ip netns exec "${ns[0]}" ping -c 1 -W 2 "${addr[i]}" >/dev/null 2>&1 ||
      die "${addr[0]} cannot reach ${addr[i]} through the switch"
  done
fi

# --- the rsh agent and the hostfile -------------------------------------------------------------
tmp=$(mktemp -d /tmp/gradus-multihost.XXXXXX)
agent=$tmp/rsh-agent hostfile=$tmp/hostfile
cat >"$agent" <<EOF
#!/bin/sh
# OpenMPI rsh agent (instead of ssh): \`rsh-agent [OPTIONS] HOST CMD...\` runs CMD in HOST's namespace.
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done  # ignore ssh-style flags
host=\$1; shift
case \$host in
$(for ((i = 0; i < hosts; i++)); do echo "  ${addr[i]}) ns=${ns[i]} ;;"; done)
  *) echo "rsh-agent: unknown host '\$host'" >&2; exit 255 ;;
esac
# Like ssh, hand the command words, joined by spaces, to a shell (they hold '; export PATH' etc.),
# on a host with its own name (a private UTS namespace): see "hostnames" in multihost.sh.
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns || exit 1; \$*"
EOF
chmod 755 "$agent"
for ((i = 0; i < hosts; i++)); do printf '%s slots=%s\n' "${addr[i]}" "$np_per_host"; done >"$hostfile"

# --- the job -------------------------------------------------------------------------------------
env_args=()
[[ -n ${OMP_NUM_THREADS:-} ]] && env_args+=(-x OMP_NUM_THREADS)
while IFS= read -r name; do env_args+=(-x "$name"); done < <(compgen -e | grep '^GRADUS_' || true)

# shellcheck disable=SC2054,SC2016  # (tcp,self is one word; $0 and $@ are for sh -c)
cmd=(ip netns exec "${ns[0]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${ns[0]}"
  mpirun --allow-run-as-root --oversubscribe
  -np $((hosts * np_per_host)) --hostfile "$hostfile" --map-by slot --bind-to none
  --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
  --mca pml ob1 --mca btl tcp,self --mca osc '^ucx'
  --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet"
  "${env_args[@]}"
  "$@")
echo "multihost.sh: $hosts hosts ${addr[0]}..${addr[hosts - 1]} on one switch, $np_per_host rank(s) each${rate:+, each cable $rate each way}" >&2
printf '+' >&2
for word in "${cmd[@]}"; do  # quoted only where a shell needs it
  if [[ $word =~ ^[][A-Za-z0-9_./,=:^+@%-]+$ ]]; then printf ' %s' "$word"; else printf " '%s'" "${word//\'/\'\\\'\'}"; fi
done >&2
echo >&2
# In the background, so that a signal to this script is handled at once (on_signal) rather than
# after mpirun returns.
tx0=() rx0=()
for ((i = 0; i < hosts; i++)); do
  tx0+=("$(bytes "${ns[i]}" "${dev[i]}" tx)") rx0+=("$(bytes "${ns[i]}" "${dev[i]}" rx)")
done
"${cmd[@]}" &
mpirun_pid=$!
rc=0
wait "$mpirun_pid" || rc=$?
mpirun_pid=
echo "multihost.sh: mpirun exited with status $rc" >&2
for ((i = 0; i < hosts; i++)); do
  echo "multihost.sh: host $i (${addr[i]}) sent $(($(bytes "${ns[i]}" "${dev[i]}" tx) - tx0[i])) bytes, received $(($(bytes "${ns[i]}" "${dev[i]}" rx) - rx0[i])) bytes" >&2
done
exit "$rc"
