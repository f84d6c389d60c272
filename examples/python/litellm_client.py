"""litellm as a client of the gateway (`openai/` prefix: any OpenAI-compatible server)."""

from __future__ import annotations

import os

import litellm


def main() -> None:
    options = {
        "model": "openai/auto",
        "api_base": os.environ.get("GATEWAY_BASE_URL", "http://127.0.0.1:8080/v1"),
        "api_key": os.environ.get("GATEWAY_KEY", "gw-dev-key"),
    }
    reply = litellm.completion(messages=[{"role": "user", "content": "Hello"}], **options)
    print(reply.model, reply.choices[0].message.content)
    for chunk in litellm.completion(
        messages=[{"role": "user", "content": "Count to five"}], stream=True, **options
    ):
        print(chunk.choices[0].delta.content or "", end="")
    print()


if __name__ == "__main__":
    main()
