#!/usr/bin/env bash
# Two emulated replicas form one GPU pool. Requests that share a long system prompt go to
# the same replica (its prefix cache holds the prompt): see x-gateway-replica and the
# growing cached_tokens.
set -euo pipefail
. "$(dirname "$0")/common.sh"
SYSTEM="You are the support assistant of ExampleShop. $(printf 'Policy line %s. ' $(seq 1 60))"
for question in "Where is my parcel?" "Can I return a mug?" "Do you ship to Norway?"; do
  curl -sS -D /tmp/gateway-affinity-headers -o /tmp/gateway-affinity-body \
    "$GATEWAY_URL/v1/chat/completions" \
    -H "Authorization: Bearer $GATEWAY_KEY" -H "Content-Type: application/json" \
    -d '{"model": "auto", "max_tokens": 16, "messages": [{"role": "system", "content": "'"$SYSTEM"'"},
         {"role": "user", "content": "'"$question"'"}]}'
  replica=$(grep -i '^x-gateway-replica' /tmp/gateway-affinity-headers | tr -d '\r')
  cached=$(grep -o '"cached_tokens":[0-9]*' /tmp/gateway-affinity-body)
  echo "$question -> $replica, $cached"
done
