"""LangChain (`langchain-openai`) against `make dev`: invoke, stream, tools, structured."""

from __future__ import annotations

import os

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

llm = ChatOpenAI(
    model="auto",
    base_url=os.environ.get("GATEWAY_BASE_URL", "http://127.0.0.1:8080/v1"),
    api_key=os.environ.get("GATEWAY_KEY", "gw-dev-key"),  # type: ignore[arg-type]
)


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"18 C and sunny in {city}"


class Mug(BaseModel):
    name: str
    price_usd: float


def main() -> None:
    answer = llm.invoke("Hello")
    print(answer.content, "| model_name:", answer.response_metadata.get("model_name"))
    print("".join(str(chunk.content) for chunk in llm.stream("Count to five")))
    called = llm.bind_tools([get_weather]).invoke("What is the weather in Paris?")
    print("tool calls:", called.tool_calls)  # type: ignore[attr-defined]
    print("structured:", llm.with_structured_output(Mug).invoke("Describe a mug."))


if __name__ == "__main__":
    main()
