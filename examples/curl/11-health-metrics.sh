#!/usr/bin/env bash
# Liveness, readiness (limits_enforced says whether rate limits and budgets are on), the
# models this key may use, and a few Prometheus metrics.
set -euo pipefail
. "$(dirname "$0")/common.sh"
curl -fsS -I "$GATEWAY_URL/healthz" | head -1
curl -fsS "$GATEWAY_URL/readyz"; echo
curl -fsS "$GATEWAY_URL/v1/models" -H "Authorization: Bearer $GATEWAY_KEY"; echo
curl -fsS "$GATEWAY_URL/metrics" | grep -E '^gateway_(requests_total|limits_enforced)' | head -5
