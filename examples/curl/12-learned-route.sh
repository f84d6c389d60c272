#!/usr/bin/env bash
# The auto-learned route scores each prompt (the probability the strong tier is needed)
# and sends it to the larger model at or above the route's threshold: a proof goes there,
# a greeting to the small one. x-gateway-route shows the score and the threshold.
set -euo pipefail
. "$(dirname "$0")/common.sh"
for prompt in "Hello there" "Prove that the square root of 2 is irrational, step by step."; do
  curl -fsS -o /dev/null -D - "$GATEWAY_URL/v1/chat/completions" \
    -H "Authorization: Bearer $GATEWAY_KEY" -H "Content-Type: application/json" \
    -d "{\"model\": \"auto-learned\", \"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}]}" \
    | grep -i '^x-gateway-route'
done
