#!/bin/sh
read -r method path proto
auth=
cr=$(printf '\r')
while read -r line; do
  line=${line%$cr}
  [ -z "$line" ] && break
  case $line in [Aa]uthorization:*) auth=${line#*: };; esac
done
case ${path%%\?*} in
  /health) printf 'HTTP/1.0 200 OK\r\n\r\n';;
  /v1/*)
    if [ -n "$VLLM_API_KEY" ] && [ "$auth" != "Bearer $VLLM_API_KEY" ]; then
      printf 'HTTP/1.0 401 Unauthorized\r\n\r\n{"error": "Unauthorized"}'
    else
      printf 'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n'
      printf '{"object":"list","data":[{"id":"%s","object":"model"}]}' "$NAME"
    fi;;
  *) printf 'HTTP/1.0 404 Not Found\r\n\r\n';;
esac
