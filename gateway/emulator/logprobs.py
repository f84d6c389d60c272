"""Plausible `logprobs` for the emulated tokens, the same for the same reply.

A sampled token's log probability is mostly close to 0 (the model was sure) with a tail
of unsure tokens: drawn from an exponential distribution, mean 0.3 nats. The top
alternatives start with the token itself and fall off below it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

_ALTERNATIVES = (" the", " a", " and", " of", " to", " in", " is", ",", ".", " that")


def token_logprobs(pieces: Sequence[str], top: int, digest: int) -> list[dict[str, Any]]:
    """One OpenAI `logprobs.content` entry per piece, with `top` alternatives each."""
    rng = random.Random(digest ^ 0x5EED)
    return [_entry(piece, top, rng) for piece in pieces]


def _entry(piece: str, top: int, rng: random.Random) -> dict[str, Any]:
    logprob = -round(min(rng.expovariate(1 / 0.3), 9.0), 4)
    alternatives = [{"token": piece, "logprob": logprob, "bytes": list(piece.encode())}]
    below = logprob
    for token in rng.sample(_ALTERNATIVES, k=min(max(top - 1, 0), len(_ALTERNATIVES))):
        if token == piece:
            continue
        below = round(below - rng.uniform(0.5, 2.5), 4)
        alternatives.append({"token": token, "logprob": below, "bytes": list(token.encode())})
    return {**alternatives[0], "top_logprobs": alternatives[:top]}
