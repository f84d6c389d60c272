"""Provider credentials taken out of everything the gateway says to a client.

Providers quote keys back in their error messages, whole or masked ("Incorrect API key
provided: sk-proj-****...abcd"). Whatever the provider and the status, every error on its
way to a client (a response body or a stream's error event) passes through one
:class:`SecretRedactor` built from every configured credential, so no translation has
to remember to do it. It runs only on error paths: the hot path never pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gateway.errors import GatewayError

REDACTED = "[redacted]"

# header names whose values are credentials (provider settings may carry custom auth)
_SECRET_HEADER = re.compile(r"auth|key|token|secret|password", re.IGNORECASE)
# characters providers use to mask the middle of a key they quote
_MASK = r"[*.\u2026]"
# a token, as far as a quoted key can run in prose or JSON
_TOKEN_CHAR = r"[^\s\"'`,;)(\[\]{}<>]"
# secrets shorter than this would redact ordinary words; no real credential is this short
_MIN_SECRET = 8


def secret_header(name: str) -> bool:
    return bool(_SECRET_HEADER.search(name))


class SecretRedactor:
    """Replaces each secret, and the masked forms providers print of it, by REDACTED."""

    def __init__(self, secrets: Iterable[str]) -> None:
        patterns: list[str] = []
        for secret in sorted({s for s in secrets if len(s) >= _MIN_SECRET}, key=len, reverse=True):
            patterns.append(re.escape(secret))
            if len(secret) >= 16:
                # the key's start, then a mask: "sk-proj-AbCd****wxyz", "sk-proj-AbCd...".
                # Never the start alone: a key beginning `upstream-` must not take the
                # word "upstream" out of the gateway's own messages.
                patterns.append(
                    re.escape(secret[:8]) + _TOKEN_CHAR + "+?" + _MASK + "{3,}" + _TOKEN_CHAR + "*"
                )
            if len(secret) >= 24:
                # a long start of the key, cut off without a mask (no ordinary word is
                # the first 16 characters of a real credential)
                patterns.append(re.escape(secret[:16]) + _TOKEN_CHAR + "*")
            # a mask then the key's last four: "sk-...wxyz", "****wxyz"
            patterns.append(_TOKEN_CHAR + "*?" + _MASK + "{3,}" + re.escape(secret[-4:]))
        self._pattern = re.compile("|".join(patterns)) if patterns else None

    def text(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def error(self, error: GatewayError) -> GatewayError:
        """The same error with its client-visible text redacted (changed in place)."""
        error.message = self.text(error.message)
        if error.param is not None:
            error.param = self.text(error.param)
        return error
