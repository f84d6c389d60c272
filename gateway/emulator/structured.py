"""JSON the emulated model writes for `response_format` and tool arguments.

`instance_of(schema, rng, words)` builds a value that validates against a JSON schema
(the subset structured-output clients send: pydantic's and zod's output, OpenAI's strict
mode), deterministic for one `random.Random` state. Covered: `type` (one or a list),
`enum`, `const`, `properties`/`required`, `additionalProperties`, `items`/`prefixItems`,
`minItems`/`maxItems`/`uniqueItems`, string `minLength`/`maxLength`/`format`, numeric
bounds and `multipleOf`, `anyOf`/`oneOf` (the first branch that is not `null`), `allOf`
(merged), and `$ref` into `$defs`/`definitions` (recursion is cut at a fixed depth).
A `pattern` is not solved: the string written is ordinary words.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Callable, Mapping
from typing import Any

Words = Callable[[int], str]

_MAX_DEPTH = 6
_FORMATS: dict[str, Callable[[random.Random], str]] = {
    "date-time": lambda rng: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:00:00Z",
    "date": lambda rng: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    "time": lambda rng: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00",
    "email": lambda rng: f"user{rng.randint(1, 999)}@example.com",
    "uri": lambda rng: f"https://example.com/item/{rng.randint(1, 999)}",
    "url": lambda rng: f"https://example.com/item/{rng.randint(1, 999)}",
    "uuid": lambda rng: str(uuid.UUID(int=rng.getrandbits(128), version=4)),
    "ipv4": lambda rng: f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
    "hostname": lambda rng: f"host{rng.randint(1, 99)}.example.com",
}


def instance_of(schema: object, rng: random.Random, words: Words) -> Any:
    """A value valid under `schema` (a JSON schema as parsed JSON)."""
    root = schema if isinstance(schema, Mapping) else {}
    return _Writer(root, rng, words).value(schema, 0)


def json_object(rng: random.Random, words: Words) -> dict[str, Any]:
    """What JSON mode (`json_object`) answers: a small object of words."""
    return {"answer": words(rng.randint(3, 12)), "confidence": round(rng.uniform(0.5, 1), 2)}


def schema_in_text(text: str, tries: int = 256) -> dict[str, Any] | None:
    """The last JSON schema quoted in a prompt: what JSON-mode clients (instructor's JSON
    mode, LangChain's json_mode with instructions) ask the model to follow. None if the
    text quotes no object schema."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    start = text.find("{")
    while start >= 0 and tries > 0:
        tries -= 1
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("properties"), dict):
            found = value
        start = text.find("{", end)
    return found


class _Writer:
    def __init__(self, root: Mapping[str, Any], rng: random.Random, words: Words) -> None:
        self._root = root
        self._rng = rng
        self._words = words

    def value(self, schema: object, depth: int) -> Any:
        if schema is True or not isinstance(schema, Mapping):
            return self._words(2)
        schema = self._resolved(schema, depth)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._rng.choice(enum)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                return self.value(self._branch(branches, depth), depth + 1)
        kind = self._kind(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "integer":
            return self._integer(schema)
        if kind == "number":
            return self._number(schema)
        if kind == "boolean":
            return self._rng.random() < 0.5
        if kind == "null":
            return None
        return self._string(schema)

    def _resolved(self, schema: Mapping[str, Any], depth: int) -> Mapping[str, Any]:
        """`$ref` followed and `allOf` merged, so the rest reads one plain schema."""
        for _ in range(32):
            ref = schema.get("$ref")
            if not isinstance(ref, str):
                break
            target = self._pointer(ref)
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **rest}
        parts = schema.get("allOf")
        if isinstance(parts, list):
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, Mapping):
                    resolved = self._resolved(part, depth)
                    properties = {**merged.get("properties", {}), **resolved.get("properties", {})}
                    required = [*merged.get("required", []), *resolved.get("required", [])]
                    merged = {**resolved, **merged, "properties": properties, "required": required}
            schema = merged
        return schema

    def _pointer(self, ref: str) -> Mapping[str, Any]:
        if not ref.startswith("#"):
            return {}
        node: Any = self._root
        for raw in ref.lstrip("#").strip("/").split("/"):
            if not raw:
                continue
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping):
                node = node.get(part)
            elif isinstance(node, list) and part.isdigit():
                node = node[int(part)]
            else:
                return {}
        return node if isinstance(node, Mapping) else {}

    def _branch(self, branches: list[Any], depth: int) -> Any:
        """The first branch that is not `null`; `null` itself past the depth limit, so a
        recursive model (`children: list[Node] | None`) ends."""
        nulls = [b for b in branches if isinstance(b, Mapping) and b.get("type") == "null"]
        if depth >= _MAX_DEPTH and nulls:
            return nulls[0]
        others = [b for b in branches if b not in nulls]
        return others[0] if others else branches[0]

    def _kind(self, schema: Mapping[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, list):
            usable = [k for k in kind if k != "null"]
            kind = usable[0] if usable else "null"
        if isinstance(kind, str):
            return kind
        if "properties" in schema or "additionalProperties" in schema:
            return "object"
        if "items" in schema or "prefixItems" in schema:
            return "array"
        return "string"

    def _object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        # every property while shallow (strict mode lists all as required anyway); past
        # the depth limit only the required ones, so recursion ends
        names = list(properties) if depth < _MAX_DEPTH else [n for n in properties if n in required]
        out = {name: self.value(properties[name], depth + 1) for name in names}
        for name in required:
            if name not in out:
                extra = schema.get("additionalProperties")
                out[name] = self.value(extra if isinstance(extra, Mapping) else True, depth + 1)
        return out

    def _array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", max(low, len(prefix), 3)))
        natural = max(low, len(prefix), self._rng.randint(1, 3))
        wanted = low if depth >= _MAX_DEPTH else min(high, natural)
        items = schema.get("items", True)
        out: list[Any] = []
        attempts = 0
        while len(out) < wanted and attempts < wanted * 8 + 8:
            attempts += 1
            index = len(out)
            item = self.value(prefix[index] if index < len(prefix) else items, depth + 1)
            if schema.get("uniqueItems") and item in out:
                continue
            out.append(item)
        return out

    def _bounds(self, schema: Mapping[str, Any], step: float) -> tuple[float, float]:
        low = schema.get("minimum")
        high = schema.get("maximum")
        if isinstance(schema.get("exclusiveMinimum"), int | float):
            low = schema["exclusiveMinimum"] + step
        if isinstance(schema.get("exclusiveMaximum"), int | float):
            high = schema["exclusiveMaximum"] - step
        low = float(low) if isinstance(low, int | float) else None
        high = float(high) if isinstance(high, int | float) else None
        if low is None:
            low = min(0.0, high - 100) if high is not None else 0.0
        if high is None:
            high = low + 100
        return low, max(low, high)

    def _integer(self, schema: Mapping[str, Any]) -> int:
        low, high = self._bounds(schema, 1)
        value = self._rng.randint(math.ceil(low), max(math.ceil(low), math.floor(high)))
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int) and multiple > 0:
            value = max(math.ceil(low / multiple), value // multiple) * multiple
        return value

    def _number(self, schema: Mapping[str, Any]) -> float:
        low, high = self._bounds(schema, 0.01)
        multiple = schema.get("multipleOf")
        if isinstance(multiple, int | float) and multiple > 0:
            first = math.ceil(low / multiple)
            steps = self._rng.randint(first, max(first, math.floor(high / multiple)))
            return float(steps * multiple)
        return round(self._rng.uniform(low, high), 2) if high > low else low

    def _string(self, schema: Mapping[str, Any]) -> str:
        fmt = schema.get("format")
        if isinstance(fmt, str) and fmt in _FORMATS:
            return _FORMATS[fmt](self._rng)
        low = int(schema.get("minLength", 0))
        high = schema.get("maxLength")
        text = self._words(self._rng.randint(1, 4))
        while len(text) < low:
            text += " " + self._words(4)
        if isinstance(high, int):
            text = text[:high].rstrip() if len(text[:high].rstrip()) >= low else text[:high]
        return text
