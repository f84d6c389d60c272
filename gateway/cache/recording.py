"""What the respond stage saw of an answer, for the response cache to keep: the encoder's
input (see gateway/cache/cached_answer.py), collected while the answer is sent and
dropped as soon as it outgrows the entry size cap (a long stream is not held in memory
only to be refused at the end)."""

from __future__ import annotations


class AnswerRecording:
    __slots__ = ("body", "held", "max_bytes", "native", "payloads", "size", "too_large")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self.too_large = False
        # the answer is in the client's own API (a same-API upstream), not chat
        self.native = False
        self.body = b""
        self.payloads: list[bytes] = []
        self.held: list[bytes] = []

    def whole(self, body: bytes, native: bool) -> None:
        self.native = native
        self._grow(len(body))
        if not self.too_large:
            self.body = body

    def feed(self, payloads: list[bytes]) -> None:
        if self.too_large:
            return
        self._grow(sum(len(p) for p in payloads))
        if not self.too_large:
            self.payloads.extend(payloads)

    def finish(self, held: list[bytes]) -> None:
        self._grow(sum(len(p) for p in held))
        if not self.too_large:
            self.held = list(held)

    def _grow(self, n: int) -> None:
        self.size += n
        if self.size > self.max_bytes:
            self.too_large = True
            self.payloads = []
            self.body = b""
