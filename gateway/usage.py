"""The normalized usage record: what every provider translation reports, and the one
thing metering and token accounting consume.

Counting convention (the OpenAI one): `input_tokens` is every prompt token, including
those read from a cache (`cached_input_tokens`) and those written to one
(`cache_write_tokens`); `output_tokens` includes `reasoning_tokens`. Translations from
providers that count differently (Anthropic reports cache reads and writes beside its
`input_tokens`) convert to this convention.
"""

from __future__ import annotations

import msgspec


class Usage(msgspec.Struct, omit_defaults=True):
    input_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    # the part of cache_write_tokens written for one hour (Anthropic prices it higher)
    cache_write_1h_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    # True when the gateway counted tokens itself because the provider reported none
    estimated: bool = False

    @property
    def uncached_input_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_input_tokens - self.cache_write_tokens)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_openai(self) -> dict[str, object]:
        """The OpenAI `usage` object for this record."""
        body: dict[str, object] = {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_input_tokens or self.cache_write_tokens:
            details: dict[str, int] = {"cached_tokens": self.cached_input_tokens}
            if self.cache_write_tokens:
                # not an OpenAI field: Anthropic's cache writes, priced apart
                details["cache_write_tokens"] = self.cache_write_tokens
            body["prompt_tokens_details"] = details
        if self.reasoning_tokens:
            body["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        return body
