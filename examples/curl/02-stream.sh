#!/usr/bin/env bash
# A streamed answer: SSE chunks, then a usage chunk with the gateway's cost (x_gateway).
set -euo pipefail
. "$(dirname "$0")/common.sh"
curl -sS -N "$GATEWAY_URL/v1/chat/completions" \
  -H "Authorization: Bearer $GATEWAY_KEY" -H "Content-Type: application/json" \
  -d '{"model": "auto", "stream": true, "stream_options": {"include_usage": true},
       "messages": [{"role": "user", "content": "Count to five"}]}'
