#!/usr/bin/env bash
# Start/stop the real services pdctl's tests use, by PID (no systemd):
#   4 sshd test hosts (2 on loopback addresses, 2 in network namespaces when allowed) and dockerd.
# Usage: RUN=<scratch folder> tests/services.sh install|start|stop
# After `start`, $RUN/env holds the variables the tests read (source it).
set -euo pipefail
RUN=${RUN:?set RUN to a scratch folder}
PIDS=$RUN/pids
mkdir -p "$RUN" "$PIDS"

install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends openssh-server openssh-client docker.io \
    iproute2 iptables shellcheck hyperfine procps curl busybox-static gcc binutils util-linux
}

bg() { # bg NAME CMD... : run in the background, log to $RUN/NAME.log, record the PID
  local name=$1; shift
  "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}

wait_for() { # wait_for SECONDS CMD...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then echo "timeout waiting for: $*" >&2; return 1; fi
    sleep 0.1
  done
}

start_ssh() {
  local d=$RUN/ssh; mkdir -p "$d" /run/sshd
  rm -f "$RUN/ssh_hosts" "$d/known_hosts"
  [ -f "$d/client_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/client_key"
  cp "$d/client_key.pub" "$d/authorized_keys"; chmod 600 "$d/authorized_keys"
  local hosts=("lo1 127.0.0.1 2222 -" "lo2 127.0.0.2 2222 -")
  if ip netns add pdctl-probe-test 2>/dev/null; then
    ip netns del pdctl-probe-test
    hosts+=("node1 10.77.1.2 22 pdctl-n1" "node2 10.77.2.2 22 pdctl-n2")
  fi
  for h in "${hosts[@]}"; do
    read -r -a parts <<<"$h"; set -- "${parts[@]}"; local name=$1 addr=$2 port=$3 ns=$4
    [ -f "$d/host_$name" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_$name"
    cat >"$d/sshd_$name.conf" <<CONF
Port $port
ListenAddress $addr
HostKey $d/host_$name
PidFile $d/sshd_$name.pid
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
AllowTcpForwarding yes
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
CONF
    if [ "$ns" = "-" ]; then
      bg "sshd_$name" /usr/sbin/sshd -D -e -f "$d/sshd_$name.conf"
    else
      local net=${addr%.*}
      ip netns del "$ns" 2>/dev/null || true
      ip link del "v$ns" 2>/dev/null || true
      ip netns add "$ns"
      ip link add "v$ns" type veth peer name eth0 netns "$ns"
      ip addr add "$net.1/24" dev "v$ns"; ip link set "v$ns" up
      ip -n "$ns" addr add "$addr/24" dev eth0
      ip -n "$ns" link set eth0 up; ip -n "$ns" link set lo up
      bg "sshd_$name" ip netns exec "$ns" unshare --uts sh -c "hostname $name; exec /usr/sbin/sshd -D -e -f $d/sshd_$name.conf"
      echo "$ns" >>"$RUN/netns.list"
    fi
    # known_hosts: the tests trust exactly these host keys
    local entry=$addr; [ "$port" = 22 ] || entry="[$addr]:$port"
    echo "$entry $(cut -d' ' -f1,2 "$d/host_$name.pub")" >>"$d/known_hosts"
    echo "$name $addr $port" >>"$RUN/ssh_hosts"
  done
  for h in "${hosts[@]}"; do read -r -a parts <<<"$h"; set -- "${parts[@]}"; wait_for 15 bash -c "echo > /dev/tcp/$2/$3"; done
}

start_dockerd() {
  command -v dockerd >/dev/null || { echo "dockerd not installed; skipping" >&2; return 0; }
  mkdir -p "$RUN/docker-root" "$RUN/docker-exec"
  bg dockerd dockerd --host="unix://$RUN/docker.sock" --data-root="$RUN/docker-root" \
     --exec-root="$RUN/docker-exec" --pidfile="$RUN/dockerd.pid" \
     --bridge=none --iptables=false --ip6tables=false
  wait_for 60 docker -H "unix://$RUN/docker.sock" version
}

write_env() {
  cat >"$RUN/env" <<ENV
export PDCTL_TEST_RUN=$RUN
export PDCTL_TEST_SSH_HOSTS=$RUN/ssh_hosts
export PDCTL_TEST_SSH_KEY=$RUN/ssh/client_key
export PDCTL_TEST_KNOWN_HOSTS=$RUN/ssh/known_hosts
ENV
  [ -S "$RUN/docker.sock" ] && echo "export PDCTL_TEST_DOCKER_HOST=unix://$RUN/docker.sock" >>"$RUN/env"
  return 0
}

stop() {
  for f in "$PIDS"/*.pid; do
    [ -e "$f" ] || continue
    kill "$(cat "$f")" 2>/dev/null || true
  done
  for f in "$PIDS"/*.pid; do
    [ -e "$f" ] || continue
    local p; p=$(cat "$f")
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
    rm -f "$f"
  done
  if [ -f "$RUN/netns.list" ]; then
    while read -r ns; do
      ip netns del "$ns" 2>/dev/null || true
      for _ in $(seq 50); do ip link show "v$ns" >/dev/null 2>&1 || break; sleep 0.1; done
    done <"$RUN/netns.list"
    rm -f "$RUN/netns.list"
  fi
  rm -f "$RUN/ssh_hosts"
  umount "$RUN/docker-exec/netns/default" 2>/dev/null || true
}

case "${1:-}" in
  install) install ;;
  start) start_ssh; start_dockerd; write_env ;;
  stop) stop ;;
  *) echo "usage: RUN=DIR $0 install|start|stop" >&2; exit 2 ;;
esac
