"""Limit key names: the percent-encoding that keeps hash tags intact."""

from __future__ import annotations

import random
import string
from urllib.parse import quote

from gateway.limits.redis_keys import hash_tag, scope_path, settled_marker_key, tenant_prefix


def test_names_are_encoded_as_quote_encodes_them_with_or_without_the_fast_path() -> None:
    rng = random.Random(22)
    alphabet = string.printable + "é{}%~"
    names = ["req-0f3a", "a b", "{t}", "k:1/2@x", "~", "", "%41"]
    names += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in range(5000)]
    for name in names:
        assert scope_path(name) == quote(name, safe=":/._-@"), name


def test_a_request_id_with_braces_cannot_move_the_settled_marker_to_another_slot() -> None:
    prefix = tenant_prefix("gw", "acme")
    marker = settled_marker_key(f"{prefix}:rl:tenant:tok", "{evil}")
    assert hash_tag(marker) == "t:acme"
    assert marker.endswith(":settled:%7Bevil%7D")
