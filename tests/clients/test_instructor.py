"""instructor against `gateway dev`, where it can be installed.

It is not a dev dependency: every instructor release pins `jiter<0.15` while the pinned
`openai` SDK needs `jiter>=0.16`, so pip refuses to install both. It works with the newer
jiter: `make instructor` installs it without its pins and runs this file (TOOLS, JSON and
JSON_SCHEMA modes all pass)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from tests.support.dev_gateway import DEV_KEY, DevGateway

try:
    import instructor
except ImportError:
    pytest.skip(
        "instructor is not installed: its releases pin jiter<0.15 against openai's "
        "jiter>=0.16; `make instructor` installs it without its pins and runs this test",
        allow_module_level=True,
    )

import openai


class Mug(BaseModel):
    name: str
    price_usd: float


@pytest.mark.parametrize("mode", ["TOOLS", "JSON", "JSON_SCHEMA"])
def test_instructor_extracts_a_model(dev: DevGateway, mode: str) -> None:
    client = instructor.from_openai(
        openai.OpenAI(base_url=dev.base_url, api_key=DEV_KEY, max_retries=0),
        mode=getattr(instructor.Mode, mode),
    )
    mug = client.chat.completions.create(
        model="auto", response_model=Mug, messages=[{"role": "user", "content": "A mug?"}]
    )
    assert isinstance(mug, Mug)
