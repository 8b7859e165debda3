#!/usr/bin/env bash
# Pack vLLM 0.23.0 and what it needs beyond the GPU machine's image (Python 3.12, torch
# 2.11.0+cu130, the packages listed in tests/gpu/README.md) into parts the device tool can
# carry (at most 48 MiB each beside the working tree), for h200.sh `stash` and `setup`.
# Run where PyPI and the Debian archive are reachable:
#   bash tests/gpu/pack.sh [OUT] [SM]     # OUT: .work/gpu-parts; SM: the GPU's, 90 (H100, H200)
# Writes OUT/1/part.aa, OUT/2/part.ab (+ SHA256SUM): carry OUT/1 in one call and OUT/2 in the
# next. Kept small by leaving out FlashAttention 2 (Hopper runs FA3), the kernels of other GPU
# architectures (tests/gpu/fatbin.py), other Pythons' deep_gemm builds and static libraries:
# ~95 MiB where the whole set is ~240 MiB.
set -euo pipefail
OUT=${1:-.work/gpu-parts} SM=${2:-90}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform any
      --platform linux_x86_64 --platform manylinux2014_x86_64)
for n in 17 24 27 28 31 34 35; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
pip download -q --no-deps "${plat[@]}" -d "$W/whl-vllm" vllm==0.23.0
pip download -q --no-deps "${plat[@]}" -d "$W/whl-deps" -r "$HERE/wheels.txt"
pip install -q --no-deps --no-compile "${plat[@]}" --target "$W/vllm" "$W"/whl-vllm/*.whl
pip install -q --no-deps --no-compile "${plat[@]}" --target "$W/deps" "$W"/whl-deps/*.whl
rm -rf "$W/vllm/vllm/vllm-rs" "$W/vllm/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so" \
  "$W/deps/xgrammar/lib/libxgrammar.a" "$W"/deps/nvidia/cudnn_frontend
find "$W/vllm/vllm/third_party/deep_gemm" -name "_C.cpython-3*.so" ! -name "*-312-*" -delete
for lib in "$W"/vllm/vllm/*.abi3.so; do python3 "$HERE/fatbin.py" strip "$lib" "$SM" | tail -1; done
mkdir -p "$W/debs"  # sshd for the harness (the image has none), and the libraries it lacks
(cd "$W/debs" && apt-get download openssh-server openssh-client openssh-sftp-server libwrap0 \
  libnsl2 libtirpc3 2>/dev/null)
tar cf "$W/debs.tar" -C "$W" debs
tar cf - -C "$W/vllm" . | xz -9 -T0 >"$W/vllm.tar.xz"
tar cf - -C "$W/deps" . | xz -9 -T0 >"$W/deps.tar.xz"
rm -rf "$OUT" && mkdir -p "$OUT/parts"
(cd "$W" && tar cf - vllm.tar.xz deps.tar.xz debs.tar) | split -b 48m - "$OUT/parts/part."
(cd "$OUT/parts" && cat part.* | sha256sum | sed 's/-$/bundle.tar/' >SHA256SUM)
i=0
for p in "$OUT"/parts/part.*; do i=$((i + 1)); mkdir -p "$OUT/$i"; mv "$p" "$OUT/$i/"; done
mv "$OUT/parts/SHA256SUM" "$OUT/$i/" && rmdir "$OUT/parts"
ls -la "$OUT"/*
