#!/bin/sh
ip=$(echo "$SSH_CONNECTION" | cut -d' ' -f3)
d="{root}/$ip"
if [ ! -d "$d" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
  exit 9
fi
case "$*" in
  --query-gpu=*) cat "$d/query-gpu.csv" ;;
  "topo -m") cat "$d/topo-m.txt" ;;
  "topo -p2p r") cat "$d/topo-p2p-r.txt" ;;
  "topo -p2p w") cat "$d/topo-p2p-w.txt" ;;
  "nvlink -s") cat "$d/nvlink-s.txt" ;;
  "") cat "$d/nvidia-smi.txt" ;;
  *) echo "fake nvidia-smi: unknown arguments $*" >&2; exit 2 ;;
esac
