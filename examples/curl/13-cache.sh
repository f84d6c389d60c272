#!/usr/bin/env bash
# The response cache on the auto-cached route: the first request is a miss and goes to a
# model; the same request again is a hit, answered from the cache at no cost (see
# x-gateway-cache and x-gateway-cost-usd). A random word keeps this run's first a miss.
set -euo pipefail
. "$(dirname "$0")/common.sh"
body="{\"model\": \"auto-cached\", \"seed\": 7, \"messages\": [{\"role\": \"user\", \"content\": \"Name a colour ($RANDOM$RANDOM)\"}]}"
for attempt in first again; do
  echo "== $attempt"
  curl -sS -o /dev/null -D - "$GATEWAY_URL/v1/chat/completions" \
    -H "Authorization: Bearer $GATEWAY_KEY" -H "Content-Type: application/json" -d "$body" \
    | grep -i '^\(HTTP\|x-gateway-cache\|x-gateway-cost-usd\)' | tr -d '\r'
done
