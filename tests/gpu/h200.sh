#!/usr/bin/env bash
# The GPU machine's side of the GPU harness (see tests/gpu/README.md). Run from the repository
# root on a Linux host with an NVIDIA GPU and no package index:
#   bash tests/gpu/h200.sh stash [DIR]           # keep the carried part(s) in DIR (.work/gpu) in ~/stash
#   bash tests/gpu/h200.sh setup-bundle          # tests/gpu/bundle.sh's folders: pdctl up --bundle
#                                                # installs vLLM; sshd, models, HAMi-core as setup
#   bash tests/gpu/h200.sh setup                 # pack.sh's parts: vLLM + deps unpacked by hand
#   bash tests/gpu/h200.sh wheels                # pack_wheels.sh's pieces (after setup or setup-bundle)
#   bash tests/gpu/h200.sh run SCENARIO [ARGS]   # python3 tests/gpu/drive.py SCENARIO ...
# Results go under $OUT (one .tgz per step, as the device tool brings back at most 8 files).
set -uo pipefail
ROOT=$(pwd)
STASH=$HOME/stash
RES=${PDCTL_GPU_RESULTS:-$HOME/results}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1
mkdir -p "$RES" "${OUT:=/tmp/out}"

say() { echo "$(date -u +%T) $*"; }

stash() {
  mkdir -p "$STASH"
  # pack.sh's folders hold files; bundle.sh's also bundle/ (merged: each call brings some of it)
  cp -r "${1:-.work/gpu}"/. "$STASH"/
  ls -la "$STASH"
  if [ -d "$STASH/bundle" ]; then du -sh "$STASH/bundle"; fi
  if [ ! -f "$RES/machine.txt" ]; then
    {
      nvidia-smi
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
      python3 -c 'import sys, torch; print(sys.version); print(sys.prefix); print(torch.__version__)'
      command -v sshd ssh ssh-keygen useradd flock ps setsid nvidia-smi python3 cmake nvcc || true
      head -2 /etc/os-release; uname -r; nproc; free -g | head -2; df -h / | tail -1
      echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; echo "PATH=$PATH"
    } >"$RES/machine.txt" 2>&1
    cat "$RES/machine.txt"
  fi
}

venv_prefix() { python3 -c 'import sys; print(sys.prefix)'; }

site_on_path() {  # ~/site first on the venv's path (a .pth file), for setup's vLLM and wheels'
  local site
  site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import sys; sys.path.insert(0, '$HOME/site')" >"$site/pdctl-gpu-vllm.pth"
}

setup() {
  local t0=$SECONDS
  say "assemble"
  cd "$HOME" || exit 1
  cat "$STASH"/part.* >bundle.tar
  if ! sha256sum -c "$STASH/SHA256SUM"; then say "bad bundle"; exit 1; fi
  tar xf bundle.tar && rm -f bundle.tar
  mkdir -p site
  for t in vllm deps extra; do [ -f $t.tar.xz ] && tar xJf $t.tar.xz -C site & done
  wait
  rm -f vllm.tar.xz deps.tar.xz extra.tar.xz
  cd "$ROOT" || exit 1
  # The image's Python is a venv (/opt/torch/.venv): make vLLM part of it, as a pip install would.
  local venv
  venv=$(venv_prefix)
  site_on_path
  printf '#!%s\nimport sys\nfrom vllm.entrypoints.cli.main import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
    "$venv/bin/python3" >"$venv/bin/vllm"
  chmod +x "$venv/bin/vllm"
  printf '#!%s\nimport sys\nfrom vllm_router.launch_router import main\nif __name__ == "__main__":\n    sys.exit(main())\n' \
    "$venv/bin/python3" >"$venv/bin/vllm-router"
  chmod +x "$venv/bin/vllm-router"
  python3 -c 'import vllm, nixl, paramiko; print("vllm", vllm.__version__)' || say "imports failed"
  models
  say "sshd"
  sshd_start
  hami
  say "setup took $((SECONDS - t0)) s"
}

wheels() {  # pack_wheels.sh's pieces (Mooncake, vllm-router, orjson), joined, checked, unpacked
  say "wheels"
  cd "$HOME" || exit 1
  cat "$STASH"/wheels.tar.xz.* >wheels.tar.xz
  if ! sha256sum -c "$STASH/WHEELS.SHA256SUM"; then say "bad wheels"; exit 1; fi
  # Into the folder setup put on the venv's path (pdctl-gpu-vllm.pth), beside vLLM; after
  # setup-bundle (vLLM installed by pdctl up --bundle) the folder and its .pth are made here.
  mkdir -p "$HOME/site"
  tar xJf wheels.tar.xz -C "$HOME/site" && rm -f wheels.tar.xz
  cd "$ROOT" || exit 1
  site_on_path
  python3 -c 'import torch, mooncake.engine, orjson, vllm_router.launch_router; print("mooncake, vllm-router: ok")' ||
    { say "wheels failed"; exit 1; }
}

models() {  # the models' config.json, each with a tokenizer as large as its vocabulary
  say "models"
  mkdir -p /root/models
  cp -r tests/gpu/models/* /root/models/
  for m in /root/models/*/; do python3 tests/gpu/tokenizer.py "$m" & done
  wait
}

hami() {
  if [ -f "$HOME/hami.tar.gz" ]; then  # only runs that carried HAMi-core's source (phase 3)
    say "HAMi-core build (background)"
    mkdir -p .hami && rm -rf .hami/src && tar xzf "$HOME/hami.tar.gz" -C .hami && mv .hami/HAMi-core .hami/src
    setsid bash -c "OUT=$RES bash tests/fixtures/gpu/hami-h200/run.sh build >$RES/hami-build.out 2>&1" &
  fi
}

# The image's distributions as preflight lists them (pdctl/preflight/bundle.py LIST).
LIST='import importlib.metadata as m; [print("dist", d.metadata["Name"], d.version) for d in m.distributions() if d.metadata["Name"]]'

setup_bundle() {  # tests/gpu/bundle.sh's folders, stashed: vLLM comes from pdctl up --bundle
  local t0=$SECONDS b=$STASH/bundle spec=$RES/bundle-spec.yaml rc
  local k=(--known-hosts /root/.ssh/pdctl_gpu_known_hosts)
  cd "$ROOT" || exit 1
  # What the image has, before anything goes in (tests/gpu/image-packages.txt pins this list).
  python3 -I -c "$LIST" | sort >"$RES/image-dists.txt"
  say "pdctl's own dependencies ($(find "$STASH/pdctl-wheels" -name "*.whl" | wc -l) wheels, --no-deps)"
  python3 -m pip install -q --no-index --no-deps "$STASH"/pdctl-wheels/*.whl || { say "pdctl deps failed"; exit 1; }
  export PYTHONPATH=$ROOT
  models
  say "sshd"
  # sshd's .debs come in the stash (offline.py layout); sshd_start unpacks them from $HOME
  if [ -f "$STASH/debs.tar" ]; then cp "$STASH/debs.tar" "$HOME/debs.tar"; fi
  sshd_start
  python3 tests/gpu/offline.py spec "$spec"
  # Joins the --split parts and checks every file's sha256 against the manifest (exit 2 names a
  # bad or missing one), then the hosts' Python, glibc and disk; records their bundle.txt.
  say "preflight --bundle"
  python3 -m pdctl preflight "$spec" --bundle "$b" --no-transfer --record "$RES/bundle-rec" "${k[@]}" >"$RES/bundle-preflight.txt" 2>&1
  rc=$?
  tail -n 25 "$RES/bundle-preflight.txt"
  if [ "$rc" = 2 ]; then say "the bundle is damaged or incomplete"; exit 1; fi
  # What pip will do with no index (the start scripts' pip, one environment at a time).
  for want in "vllm==0.23.0 nixl==1.5.1" "vllm-router==0.1.17"; do
    # shellcheck disable=SC2086  # two requirements in one word
    python3 -m pip install --dry-run --no-index --find-links "$b/wheels" $want 2>&1 |
      grep -v '^Requirement already satisfied' | tee -a "$RES/bundle-dry-run.txt" | tail -n 4
  done
  say "up --bundle (installs vLLM, NIXL and vllm-router into $(venv_prefix) with no index)"
  python3 -m pdctl up "$spec" --bundle "$b" --yes --timeout 900 "${k[@]}" 2>&1 | tee "$RES/bundle-up.txt" | tail -n 30
  rc=${PIPESTATUS[0]}
  python3 -c 'import vllm, nixl, vllm_router; print("vllm", vllm.__version__)' || say "imports failed"
  # held against the scripts rendered for the bundle: running and healthy, none outdated
  python3 -m pdctl status "$spec" --bundle "$b" "${k[@]}" >"$RES/bundle-status.txt" 2>&1 || say "status failed"
  python3 -m pdctl down "$spec" --yes "${k[@]}" >"$RES/bundle-down.txt" 2>&1 || say "down failed"
  [ "$rc" = 0 ] || { say "up --bundle failed (exit $rc)"; exit 1; }
  hami
  say "setup-bundle took $((SECONDS - t0)) s"
}

sshd_start() {
  local d=$HOME/sshd sshd keygen session_env="PATH=$PATH"
  # Sessions get the variables this machine's CUDA needs (a GPU host has them system-wide).
  [ -n "${LD_LIBRARY_PATH:-}" ] && session_env="$session_env LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  mkdir -p "$d" /run/sshd "$HOME/.ssh"
  sshd=$(command -v sshd || true)
  keygen=$(command -v ssh-keygen || true)
  if [ -z "$sshd" ] || [ -z "$keygen" ]; then
    # Debian's openssh-server, carried as .deb files and unpacked (no package index here).
    mkdir -p "$d/root"
    tar xf "$HOME/debs.tar" -C "$d"
    for f in "$d"/debs/*.deb; do dpkg -x "$f" "$d/root"; done
    sshd=$d/root/usr/sbin/sshd keygen=$d/root/usr/bin/ssh-keygen
    # Only the libraries the machine lacks come from the unpacked packages.
    mkdir -p "$d/lib"
    for _ in 1 2 3; do  # a library found can need one that is not (libwrap needs libnsl)
      for lib in $(LD_LIBRARY_PATH=$d/lib ldd "$sshd" "$keygen" "$d/root/usr/bin/ssh" 2>/dev/null |
        awk '/not found/ {print $1}' | sort -u); do
        cp -L "$(find "$d/root" -name "$lib" | head -1)" "$d/lib/" || say "missing $lib"
      done
    done
    export LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  id sshd >/dev/null 2>&1 || useradd -r -M -d /run/sshd -s /usr/sbin/nologin sshd 2>/dev/null ||
    echo 'sshd:x:74:65534::/run/sshd:/usr/sbin/nologin' >>/etc/passwd
  [ -f "$d/host_key" ] || "$keygen" -q -t ed25519 -N '' -f "$d/host_key"
  [ -f /root/.ssh/pdctl_gpu ] || "$keygen" -q -t ed25519 -N '' -f /root/.ssh/pdctl_gpu
  cp /root/.ssh/pdctl_gpu.pub "$d/authorized_keys"
  cat >"$d/sshd_config" <<CONF
Port ${PDCTL_GPU_SSH_PORT:-2222}
ListenAddress 127.0.0.1
ListenAddress 127.0.0.2
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
MaxSessions 64
MaxStartups 64:30:128
Subsystem sftp internal-sftp
SetEnv $session_env
CONF
  "$sshd" -t -f "$d/sshd_config" && "$sshd" -f "$d/sshd_config" -E "$RES/sshd.log"
  local key
  key=$(cut -d' ' -f1,2 "$d/host_key.pub")
  local port=${PDCTL_GPU_SSH_PORT:-2222}
  printf '[127.0.0.1]:%s %s\n[127.0.0.2]:%s %s\n' "$port" "$key" "$port" "$key" >/root/.ssh/pdctl_gpu_known_hosts
  sleep 1
  PORT=$port python3 - <<'PY'
import os
import paramiko
c = paramiko.SSHClient()
c.load_host_keys("/root/.ssh/pdctl_gpu_known_hosts")
for a in ("127.0.0.1", "127.0.0.2"):
    c.connect(a, int(os.environ["PORT"]), "root", key_filename="/root/.ssh/pdctl_gpu", timeout=10)
    _, o, e = c.exec_command("echo ok $(hostname); command -v nvidia-smi python3 flock setsid; echo LD=$LD_LIBRARY_PATH")
    print(a, o.read().decode().strip().replace("\n", " | "), e.read().decode().strip())
    c.close()
PY
}

run() {
  local scenario=$1; shift
  export PYTHONPATH=$ROOT
  python3 tests/gpu/drive.py "$scenario" "$RES" "$@" 2>&1 | tee "$RES/$scenario.out"
}

pack() {  # everything recorded so far, as one file under $OUT
  tar czf "$OUT/results-$1.tgz" -C "$RES" . 2>/dev/null
  ls -la "$OUT"
}

step=$1; shift
case $step in
  stash) stash "$@" ;;
  setup) setup 2>&1 | tee "$RES/setup.out" ;;
  setup-bundle) setup_bundle 2>&1 | tee "$RES/setup-bundle.out" ;;
  sshd) sshd_start ;;
  wheels) wheels ;;
  run) run "$@" ;;
  pack) pack "$@" ;;
  dists) python3 -I -c "$LIST" | sort >"$OUT/image-dists.txt"; wc -l "$OUT/image-dists.txt" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
