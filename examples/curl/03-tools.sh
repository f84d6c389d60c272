#!/usr/bin/env bash
# Tool calling: the (emulated) model calls the tool the user asks for, then answers
# once the tool's result is in the conversation.
set -euo pipefail
. "$(dirname "$0")/common.sh"
TOOLS='[{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}]'
chat '{"model": "auto", "tools": '"$TOOLS"',
       "messages": [{"role": "user", "content": "What is the weather in Paris?"}]}'
chat '{"model": "auto", "tools": '"$TOOLS"', "messages": [
  {"role": "user", "content": "What is the weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"}]}'
