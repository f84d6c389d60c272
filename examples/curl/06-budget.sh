#!/usr/bin/env bash
# gw-dev-limited has a $0.0005 daily budget: a request that may cost more (max_tokens 4000
# on the `best` route) is refused with 429 insufficient_quota before it is sent.
set -euo pipefail
. "$(dirname "$0")/common.sh"
chat '{"model": "best", "max_tokens": 4000,
       "messages": [{"role": "user", "content": "Write a long essay."}]}' "$GATEWAY_LIMITED_KEY"
