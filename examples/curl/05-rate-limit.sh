#!/usr/bin/env bash
# gw-dev-limited has a token bucket of 3 requests refilled at 6 per minute: the 4th quick
# request gets 429 rate_limit_exceeded with Retry-After (see x-ratelimit-* headers).
set -euo pipefail
. "$(dirname "$0")/common.sh"
for i in 1 2 3 4 5; do
  curl -sS -o /dev/null -D - "$GATEWAY_URL/v1/chat/completions" \
    -H "Authorization: Bearer $GATEWAY_LIMITED_KEY" -H "Content-Type: application/json" \
    -d '{"model": "auto", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}' \
    | grep -i '^\(HTTP\|x-ratelimit-remaining-requests\|retry-after\)' | tr -d '\r' | paste -sd' '
done
