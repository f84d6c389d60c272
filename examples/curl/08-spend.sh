#!/usr/bin/env bash
# Spend recorded so far, with the admin key: the same report as
# `gateway spend --config config/dev.yaml --group-by key`.
set -euo pipefail
. "$(dirname "$0")/common.sh"
curl -fsS "$GATEWAY_URL/admin/spend?group_by=key" -H "Authorization: Bearer $GATEWAY_ADMIN_KEY"
echo
