#!/usr/bin/env bash
# Structured output: JSON mode, then a JSON schema the answer must validate against
# (the emulator writes a valid instance, the same for the same seed).
set -euo pipefail
. "$(dirname "$0")/common.sh"
chat '{"model": "auto", "response_format": {"type": "json_object"},
       "messages": [{"role": "user", "content": "Answer in JSON: is water wet?"}]}'
chat '{"model": "auto", "seed": 7, "response_format": {"type": "json_schema", "json_schema": {
  "name": "mug", "strict": true, "schema": {"type": "object", "additionalProperties": false,
  "required": ["name", "price_usd", "colours"], "properties": {"name": {"type": "string"},
  "price_usd": {"type": "number", "minimum": 1, "maximum": 50},
  "colours": {"type": "array", "items": {"type": "string", "enum": ["blue", "white"]}}}}}},
  "messages": [{"role": "user", "content": "Describe a mug as JSON."}]}'
