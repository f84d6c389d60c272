"""Pairwise judging of a strong and a weak model's answers to one request: the judge's
prompt, reading its verdict, and turning two verdicts (one per answer order) into the
labelled-prompt qualities `gateway route train` and `calibrate` read.

Each pair is judged twice, the strong answer shown first and then second: LLM judges
favour a position, and a verdict that flips with the order is a tie in effect. This is how
the shipped OA labels were made (data/routing/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["A", "B", "C"]

JUDGE_SYSTEM = (
    "You compare two AI assistants' answers to the same request. Decide which answer "
    "serves the user better: correct, helpful, complete and doing what was asked. Do not "
    "favour an answer for coming first or second, for its length alone, or for its style "
    "over its substance. Explain briefly, then end with your verdict alone on the last "
    'line: "[[A]]" if assistant A\'s answer is better, "[[B]]" if assistant B\'s is, '
    '"[[C]]" for a tie.'
)

_VERDICT = re.compile(r"\[\[\s*([ABC])\s*\]\]")


def judge_messages(
    conversation: Sequence[tuple[str, str]], answer_a: str, answer_b: str
) -> list[dict[str, str]]:
    """The chat messages that ask a judge model for its verdict on one answer order.
    `conversation` is the request's (role, text) turns, the last usually the user's."""
    shown = "\n\n".join(f"{role.upper()}:\n{text}" for role, text in conversation)
    body = (
        f"[The conversation]\n{shown}\n[End of the conversation]\n\n"
        f"[Assistant A's answer]\n{answer_a}\n[End of assistant A's answer]\n\n"
        f"[Assistant B's answer]\n{answer_b}\n[End of assistant B's answer]"
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": body}]


def read_verdict(text: str) -> Verdict | None:
    """The judge's last `[[A]]`, `[[B]]` or `[[C]]`; None when it gave none."""
    found = _VERDICT.findall(text)
    if not found:
        return None
    verdict: Verdict = found[-1]
    return verdict


@dataclass(frozen=True)
class PairLabel:
    """A request's labels: the strong model's share of the verdicts (a tie counts half)
    and the weak model's, which add up to 1."""

    strong_quality: float
    weak_quality: float
    # the verdicts as the judge gave them: strong shown first, then weak shown first
    verdicts: tuple[Verdict | None, Verdict | None]

    @property
    def consistent(self) -> bool:
        """Both orders gave a verdict and they name the same winner (or both a tie)."""
        first, second = self.verdicts
        if first is None or second is None:
            return False
        return _strong_share(first, strong_shown_first=True) == _strong_share(
            second, strong_shown_first=False
        )


def combine(strong_first: Verdict | None, weak_first: Verdict | None) -> PairLabel | None:
    """Both orders' verdicts as one label (an order without a verdict is left out);
    None when neither order gave one."""
    shares = [
        _strong_share(verdict, strong_shown_first=first)
        for verdict, first in ((strong_first, True), (weak_first, False))
        if verdict is not None
    ]
    if not shares:
        return None
    strong = sum(shares) / len(shares)
    return PairLabel(strong, 1.0 - strong, (strong_first, weak_first))


def _strong_share(verdict: Verdict, *, strong_shown_first: bool) -> float:
    if verdict == "C":
        return 0.5
    strong_letter = "A" if strong_shown_first else "B"
    return 1.0 if verdict == strong_letter else 0.0
