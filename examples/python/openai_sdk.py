"""The official `openai` SDK against `make dev`: plain, streamed, tools, structured."""

from __future__ import annotations

import os

from openai import OpenAI
from pydantic import BaseModel

client = OpenAI(
    base_url=os.environ.get("GATEWAY_BASE_URL", "http://127.0.0.1:8080/v1"),
    api_key=os.environ.get("GATEWAY_KEY", "gw-dev-key"),
)


class Mug(BaseModel):
    name: str
    price_usd: float
    colours: list[str]


def main() -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Hello"}]
    )
    reply = raw.parse()
    print("served by", reply.model, "| route:", raw.headers["x-gateway-route"])
    print(reply.choices[0].message.content)

    for chunk in client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "Count to five"}],
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
        elif chunk.usage is not None:
            print("\nusage:", chunk.usage.total_tokens, "tokens")

    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    called = client.chat.completions.create(
        model="auto",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[weather],  # type: ignore[list-item]
    )
    print("tool call:", called.choices[0].message.tool_calls)

    parsed = client.chat.completions.parse(
        model="auto",
        messages=[{"role": "user", "content": "Describe a mug."}],
        response_format=Mug,
    )
    print("structured:", parsed.choices[0].message.parsed)


if __name__ == "__main__":
    main()
