# Sourced by the other scripts: where the gateway is and which keys to use (the dev keys
# that `make dev` prints). Override with GATEWAY_URL, GATEWAY_KEY, ...
GATEWAY_URL="${GATEWAY_URL:-http://127.0.0.1:8080}"
GATEWAY_KEY="${GATEWAY_KEY:-gw-dev-key}"
GATEWAY_LIMITED_KEY="${GATEWAY_LIMITED_KEY:-gw-dev-limited}"
GATEWAY_ADMIN_KEY="${GATEWAY_ADMIN_KEY:-gw-dev-admin}"

# chat BODY [KEY]: POST a chat completion, print the status line, the gateway's headers
# and the body
chat() {
  curl -sS -i "$GATEWAY_URL/v1/chat/completions" \
    -H "Authorization: Bearer ${2:-$GATEWAY_KEY}" -H "Content-Type: application/json" \
    -d "$1" | grep -iv '^\(date\|content-length\):'
  echo
}
