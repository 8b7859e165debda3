#!/bin/sh
port=8000; name=$1
while [ $# -gt 0 ]; do
  case $1 in --port) port=$2; shift;; --served-model-name) name=$2; shift;; esac
  shift
done
export NAME=$name
echo "auth stand-in serving $name on port $port"
exec nc -ll -p "$port" -e /answer.sh
