#!/usr/bin/env bash
# A first request; the x-gateway-* headers say which model served it, why, and its cost.
set -euo pipefail
. "$(dirname "$0")/common.sh"
chat '{"model": "auto", "messages": [{"role": "user", "content": "Hello"}]}'
