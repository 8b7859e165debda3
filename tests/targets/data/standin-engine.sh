#!/bin/sh
# Stand-in for `vllm serve` args: MODEL --port P --served-model-name N
trap 'exit 0' TERM
model=$1; shift
port=8000; name=$model
while [ $# -gt 0 ]; do
  case $1 in --port) port=$2; shift;; --served-model-name) name=$2; shift;; esac
  shift
done
# A test steers one container through its HF cache folder (a folder per spec host):
# `listen` overrides the address:port, `log` is printed first, `hold` delays serving while it
# exists (so a test sees each stage however slow the machine is).
ctl=/root/.cache/huggingface/standin
[ -f "$ctl/listen" ] && port=$(cat "$ctl/listen")
[ -f "$ctl/log" ] && cat "$ctl/log"
while [ -e "$ctl/hold" ]; do sleep 0.2; done
case $model in /missing*)
  echo "OSError: stand-in: model path $model does not exist" >&2; exit 1;;
esac
mkdir -p /www/v1
: > /www/health
printf '{"object":"list","data":[{"id":"%s","object":"model"}]}' "$name" > /www/v1/models
echo "stand-in engine serving $name on port $port"
# httpd in the background: the shell (PID 1) ends on SIGTERM, so a stop takes no grace time
httpd -f -p "$port" -h /www &
trap 'kill $!; exit 0' TERM
wait
