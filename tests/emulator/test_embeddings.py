"""The emulator's /v1/embeddings over real HTTP, read with the official openai SDK."""

from __future__ import annotations

import math

import openai
import pytest

from gateway.emulator.embeddings import embed
from tests.emulator.emulator_process import emulator_thread


def test_vectors_are_deterministic_unit_length_and_distinct() -> None:
    a = embed("alpha", 32)
    assert a == embed("alpha", 32)
    assert a != embed("beta", 32) and a != embed("alpha", 32, seed=1)
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-9)


def test_the_sdk_gets_vectors_of_the_requested_size_in_order() -> None:
    with emulator_thread(model="emu-embed") as emulator:
        client = openai.OpenAI(base_url=emulator.base_url + "/v1", api_key="x")
        response = client.embeddings.create(
            model="emu-embed", input=["one", "two", "three"], dimensions=48
        )
        assert [d.index for d in response.data] == [0, 1, 2]
        assert all(len(d.embedding) == 48 for d in response.data)
        assert response.data[1].embedding == pytest.approx(embed("two", 48))
        with pytest.raises(openai.BadRequestError):
            client.embeddings.create(model="emu-embed", input=["x"], dimensions=100_000)
