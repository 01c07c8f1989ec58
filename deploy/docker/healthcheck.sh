#!/bin/bash
# Container health check: GET /readyz on the admin port, healthy on HTTP 200 (the server answers
# 503 while it drains). Uses bash's /dev/tcp so the runtime image needs no HTTP client.
#
#   leapcache-healthcheck [PORT]      PORT defaults to 9470, the image's metrics_listen port
set -euo pipefail
port="${1:-9470}"
exec 3<>"/dev/tcp/127.0.0.1/${port}"
printf 'GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
read -r -t 5 _ code _ <&3
[ "${code}" = "200" ]
