#!/usr/bin/env bash
# Errors are OpenAI-shaped: a bad key (401), an unknown model (404), a bad field (400).
set -euo pipefail
. "$(dirname "$0")/common.sh"
chat '{"model": "auto", "messages": [{"role": "user", "content": "Hi"}]}' gw-wrong-key
chat '{"model": "no-such-model", "messages": [{"role": "user", "content": "Hi"}]}'
chat '{"model": "auto", "temperature": 9, "messages": [{"role": "user", "content": "Hi"}]}'
