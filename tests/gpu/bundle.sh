#!/usr/bin/env bash
# The GPU harness's vLLM as a `pdctl bundle` (docs/offline.md), for the GPU machine that has no
# package index and takes files in device calls of at most 48 MiB (tests/gpu/README.md). Run
# from the repository root where PyPI and the Debian archive are reachable:
#   bash tests/gpu/bundle.sh [OUT]    # OUT: .work/gpu-bundle; PYTHON: the Python that runs pdctl
# 1. tests/gpu/offline.py writes the spec the harness installs from (phase 2's: vLLM 0.23.0 and
#    NIXL in the image's venv, vllm-router in the same venv);
# 2. `pdctl bundle` resolves its whole closure for the image (Python 3.12, glibc 2.39, x86_64);
# 3. offline.py writes what the image has (tests/gpu/image-packages.txt) as the recording
#    `--facts` reads, and `pdctl bundle --facts --skip-installed --split 48Mi` leaves that out
#    (torch and its CUDA wheels) and cuts every file over 48 MiB into parts;
# 4. sshd's Debian packages and pdctl's own dependencies (pdctl runs there before vLLM does) go
#    beside it, and offline.py lays it all out in OUT/1, OUT/2, ...: one folder per device call.
# On the device: `bash tests/gpu/h200.sh stash OUT/i` for each i, the last with `setup-bundle`.
# OUT.work keeps the bundle between runs: a second run downloads only what changed.
set -euo pipefail
OUT=${1:-.work/gpu-bundle}
PY=${PYTHON:-python3}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$OUT.work
mkdir -p "$W"
# xgrammar's pin (constraints.txt) spares pip a long backtrack; PIP_CONSTRAINT replaces any
# configured constraint file for these runs.
export PIP_CONSTRAINT=$HERE/constraints.txt
"$PY" "$HERE/offline.py" spec "$W/spec.yaml"
echo "== the closure (pdctl bundle)"
"$PY" -m pdctl bundle "$W/spec.yaml" -o "$W/bundle" --python 3.12 --platform manylinux_2_39_x86_64
echo "== what the image has (--facts), left out (--skip-installed), cut (--split)"
rm -rf "$W/rec"
"$PY" "$HERE/offline.py" facts "$HERE/image-packages.txt" "$W/bundle/wheels" "$W/rec"
"$PY" -m pdctl bundle "$W/spec.yaml" -o "$W/bundle" --facts "$W/rec" --skip-installed \
  --split 48Mi
echo "== sshd's packages, pdctl's own dependencies"
rm -rf "$W/extra" && mkdir -p "$W/extra/debs"
(cd "$W/extra/debs" && apt-get download openssh-server openssh-client openssh-sftp-server \
  libwrap0 libnsl2 libtirpc3 2>/dev/null)
tar cf "$W/extra/debs.tar" -C "$W/extra" debs && rm -rf "$W/extra/debs"
"$PY" "$HERE/offline.py" pdctl-deps "$HERE/image-packages.txt" "$W/extra/pdctl-wheels"
echo "== one folder per device call"
"$PY" "$HERE/offline.py" layout "$W/bundle" "$W/extra" "$OUT" | tee "$OUT.txt"
