"""instructor against `make dev` (install it yourself: `pip install instructor`; it is not a
dev dependency because every release pins jiter below what the openai SDK needs)."""

from __future__ import annotations

import os

import instructor
from openai import OpenAI
from pydantic import BaseModel


class Mug(BaseModel):
    name: str
    price_usd: float


def main() -> None:
    client = instructor.from_openai(
        OpenAI(
            base_url=os.environ.get("GATEWAY_BASE_URL", "http://127.0.0.1:8080/v1"),
            api_key=os.environ.get("GATEWAY_KEY", "gw-dev-key"),
        )
    )
    mug = client.chat.completions.create(
        model="auto", response_model=Mug, messages=[{"role": "user", "content": "A mug?"}]
    )
    print(mug)


if __name__ == "__main__":
    main()
