#!/usr/bin/env bash
# The dev tenant may override routing: x-gateway-route picks a route, and
# x-gateway-min-quality raises the quality floor (here: only emulated-llama qualifies).
set -euo pipefail
. "$(dirname "$0")/common.sh"
curl -fsS -o /dev/null -D - "$GATEWAY_URL/v1/chat/completions" \
  -H "Authorization: Bearer $GATEWAY_KEY" -H "Content-Type: application/json" \
  -H "x-gateway-min-quality: 0.55" \
  -d '{"model": "auto", "messages": [{"role": "user", "content": "Hello"}]}' \
  | grep -i '^x-gateway'
