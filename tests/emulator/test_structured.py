"""The emulator answers structured-output requests as a real model would (issue 18):
`response_format` JSON mode and JSON schema (valid under the schema, the same per seed),
`n` choices, `logprobs`, `seed`, and `message.refusal: null`.

The schemas come from pydantic, as the clients that send them (the SDK's `.parse`,
LangChain, instructor, pydantic-ai) build them; each answer is checked with `jsonschema`
and parsed back into the model.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import date
from enum import StrEnum
from typing import Any, Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from gateway.emulator.structured import instance_of
from tests.emulator.emulator_process import EmulatorThread, emulator_thread


class Colour(StrEnum):
    red = "red"
    green = "green"


class Address(BaseModel):
    street: str
    city: str = Field(min_length=3, max_length=20)
    postcode: str | None = None


class Person(BaseModel):
    name: str
    age: int = Field(ge=18, le=99)
    height_m: float = Field(gt=1.0, lt=2.5)
    colour: Colour
    kind: Literal["customer", "staff"]
    tags: list[str] = Field(min_length=1, max_length=4)
    address: Address
    previous: list[Address] = Field(default_factory=list)
    born: date
    score: int = Field(multiple_of=5, ge=0, le=100)


class Node(BaseModel):
    label: str
    children: list[Node] | None = None


SCHEMAS: list[type[BaseModel]] = [Person, Address, Node]


def words(count: int) -> str:
    return " ".join(["emulated"] * count)


@pytest.mark.parametrize("model", SCHEMAS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("seed", range(12))
def test_a_schema_instance_validates_and_parses_back(model: type[BaseModel], seed: int) -> None:
    schema = model.model_json_schema()
    value = instance_of(schema, random.Random(seed), words)
    jsonschema.validate(value, schema)
    model.model_validate(value)


def test_strict_mode_schemas_with_refs_and_nullable_unions_validate() -> None:
    # the shape OpenAI's strict mode asks for: every property required, no extras
    schema: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["items", "total", "note"],
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "minItems": 2},
            "total": {"type": "number", "minimum": 0},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
        "$defs": {
            "Line": {
                "type": "object",
                "additionalProperties": False,
                "required": ["sku", "qty"],
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            }
        },
    }
    for seed in range(20):
        value = instance_of(schema, random.Random(seed), words)
        jsonschema.validate(value, schema)
        assert len(value["items"]) >= 2


@pytest.fixture(scope="module")
def emulator() -> Iterator[EmulatorThread]:
    with emulator_thread(time_scale=0.0, model="emu") as running:
        yield running


@pytest.fixture
def client(emulator: EmulatorThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="none", max_retries=0)


ASK = [{"role": "user", "content": "Describe a person."}]


def test_the_sdk_parse_gets_an_instance_of_the_schema(client: openai.OpenAI) -> None:
    completion = client.chat.completions.parse(
        model="emu",
        messages=ASK,
        response_format=Person,  # type: ignore[arg-type]
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Person)
    assert message.refusal is None


def test_json_schema_answers_are_the_same_per_seed_and_differ_across_seeds(
    client: openai.OpenAI,
) -> None:
    schema = {"name": "person", "schema": Person.model_json_schema(), "strict": False}

    def ask(seed: int) -> str:
        reply = client.chat.completions.create(
            model="emu",
            messages=ASK,  # type: ignore[arg-type]
            response_format={"type": "json_schema", "json_schema": schema},  # type: ignore[typeddict-item]
            seed=seed,
        )
        return reply.choices[0].message.content or ""

    first = ask(1)
    assert ask(1) == first
    assert len({ask(seed) for seed in range(2, 8)} | {first}) > 1
    Person.model_validate_json(first)


def test_json_mode_answers_a_json_object_streamed_or_not(client: openai.OpenAI) -> None:
    fmt: Any = {"type": "json_object"}
    reply = client.chat.completions.create(model="emu", messages=ASK, response_format=fmt)  # type: ignore[arg-type]
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    stream = client.chat.completions.create(
        model="emu",
        messages=ASK,
        response_format=fmt,
        stream=True,  # type: ignore[arg-type]
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert json.loads(text) == json.loads(reply.choices[0].message.content or "")


def test_n_answers_n_distinct_choices_streamed_or_not(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model="emu", messages=ASK, n=3)  # type: ignore[arg-type]
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) == 3
    stream = client.chat.completions.create(model="emu", messages=ASK, n=3, stream=True)  # type: ignore[arg-type]
    streamed: dict[int, str] = {0: "", 1: "", 2: ""}
    finished: dict[int, str | None] = {}
    for chunk in stream:
        for choice in chunk.choices:
            streamed[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
    assert [streamed[i] for i in range(3)] == texts
    assert finished == {0: "stop", 1: "stop", 2: "stop"}


def test_logprobs_are_plausible_and_spell_the_content(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model="emu",
        messages=ASK,
        logprobs=True,
        top_logprobs=3,  # type: ignore[arg-type]
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    entries = choice.logprobs.content
    assert "".join(e.token for e in entries) == choice.message.content
    for entry in entries:
        assert -10 < entry.logprob <= 0
        assert 1 <= len(entry.top_logprobs) <= 3
        assert entry.top_logprobs[0].token == entry.token
        ranked = [t.logprob for t in entry.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)
    without = client.chat.completions.create(model="emu", messages=ASK)  # type: ignore[arg-type]
    assert without.choices[0].logprobs is None


def test_a_non_streamed_message_carries_refusal_null(emulator: EmulatorThread) -> None:
    raw = httpx.post(
        emulator.base_url + "/v1/chat/completions",
        json={"model": "emu", "messages": ASK},
        timeout=10,
    ).json()
    message = raw["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None


def test_tool_arguments_validate_under_a_pydantic_schema(client: openai.OpenAI) -> None:
    tool: Any = {
        "type": "function",
        "function": {"name": "record_person", "parameters": Person.model_json_schema()},
    }
    reply = client.chat.completions.create(
        model="emu",
        messages=ASK,  # type: ignore[arg-type]
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "record_person"}},
    )
    calls = reply.choices[0].message.tool_calls
    assert calls is not None and calls[0].function.name == "record_person"  # type: ignore[union-attr]
    Person.model_validate_json(calls[0].function.arguments)  # type: ignore[union-attr]


def test_json_mode_follows_a_schema_the_prompt_quotes(client: openai.OpenAI) -> None:
    # how instructor's JSON mode (and LangChain's json_mode with instructions) ask for it
    prompt = (
        "Answer with the parsed object in json that matches this json_schema:\n\n"
        + json.dumps(Person.model_json_schema(), indent=2)
        + "\n\nMake sure to return an instance of the JSON, not the schema itself."
    )
    fmt: Any = {"type": "json_object"}
    for seed in range(3):
        reply = client.chat.completions.create(
            model="emu",
            messages=[{"role": "system", "content": prompt}, *ASK],  # type: ignore[list-item]
            response_format=fmt,
            seed=seed,
        )
        Person.model_validate_json(reply.choices[0].message.content or "")
