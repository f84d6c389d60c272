"""pydantic-ai against `make dev`: a typed answer and a tool the agent calls."""

from __future__ import annotations

import os

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

model = OpenAIChatModel(
    "auto",
    provider=OpenAIProvider(
        base_url=os.environ.get("GATEWAY_BASE_URL", "http://127.0.0.1:8080/v1"),
        api_key=os.environ.get("GATEWAY_KEY", "gw-dev-key"),
    ),
)


class Mug(BaseModel):
    name: str
    price_usd: float


def main() -> None:
    print(Agent(model, output_type=Mug).run_sync("Describe a mug.").output)
    agent = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return f"18 C and sunny in {city}"

    print(agent.run_sync("What is the weather in Paris?").output)


if __name__ == "__main__":
    main()
