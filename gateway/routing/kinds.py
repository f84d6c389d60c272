"""The kind of a request, from its last user turn: code, math, extraction (work over a
text the user supplies: pull out, summarise, classify), writing (compose or rewrite
prose), chat (an open question or conversation) or other (everything else, e.g. an
exam-style multiple-choice question).

Measured quality is kept per route, served model and kind, because a cheap model's
quality against the reference differs far more between kinds than between prompts of one
kind. The categories are heuristic: keyword and shape tests over the turn's opening and
end, not a trained model; docs/evaluation.md has their confusion on the shipped labelled
sets (bench/request_kinds.py). Pure, and microseconds on a 2 KB prompt.
"""

from __future__ import annotations

import re
from typing import Literal

RequestKind = Literal["code", "math", "extraction", "writing", "chat", "other"]
KINDS: tuple[RequestKind, ...] = ("code", "math", "extraction", "writing", "chat", "other")

# what is read of a long turn: its opening (the instruction, usually) and its end (a
# question asked after a pasted text)
HEAD_CHARS = 400
TAIL_CHARS = 160

# punctuation becomes a space, so `split` yields words (`+` and `#` stay: c++, c#)
_SPACES = str.maketrans({c: " " for c in "!\"$%&'()*,-./:;<=>?@[\\]^_`{|}~\t\n\r"})
_CODE_MARKS = ("```", "def ", "#include", "=>", "();", "console.log", "import ")
_CODE_WORDS = frozenset(
    [
        "python",
        "javascript",
        "typescript",
        "java",
        "c++",
        "c#",
        "rust",
        "golang",
        "sql",
        "regex",
        "bash",
        "code",
        "coding",
        "compile",
        "compiler",
        "debug",
        "html",
        "css",
        "function",
        "functions",
        "algorithm",
        "implement",
        "implementation",
        "programming",
        "api",
    ]
)
_ARITHMETIC = re.compile(r"\d\s*[-+*/^×÷=<>]\s*\d|\d\s*%|\$\s?\d")
_MATH_WORDS = frozenset(
    [
        "solve",
        "equation",
        "equations",
        "calculate",
        "compute",
        "probability",
        "integral",
        "derivative",
        "remainder",
        "prime",
        "sum",
        "product",
        "average",
        "percent",
        "percentage",
        "fraction",
        "ratio",
        "total",
        "math",
        "arithmetic",
        "divisible",
    ]
)
_MATH_PHRASES = ("how many", "how much", "how long", "how far", "how old")
_EXTRACTION_WORDS = frozenset(
    [
        "extract",
        "summarize",
        "summarise",
        "summary",
        "summarization",
        "tldr",
        "classify",
        "categorize",
        "categorise",
        "json",
        "parse",
        "sentiment",
    ]
)
_EXTRACTION_PHRASES = (
    "from the following",
    "the following text",
    "the following passage",
    "the following article",
    "the text below",
    "given text",
    "the passage",
    "key points",
    "identify the",
    "list all",
    "find all",
)
_WRITING_VERBS = frozenset(["write", "draft", "compose", "craft", "create", "generate"])
_WRITING_NOUNS = frozenset(
    [
        "essay",
        "story",
        "poem",
        "email",
        "letter",
        "article",
        "blog",
        "post",
        "speech",
        "song",
        "lyrics",
        "haiku",
        "limerick",
        "review",
        "report",
        "description",
        "slogan",
        "tweet",
        "advertisement",
        "proposal",
        "bio",
        "novel",
        "dialogue",
        "outline",
        "paragraph",
        "introduction",
        "chapter",
        "announcement",
        "invitation",
        "message",
        "screenplay",
        "narrative",
        "sonnet",
    ]
)
_WRITING_WORDS = frozenset(
    ["rewrite", "rephrase", "paraphrase", "proofread", "roleplay", "pretend", "imagine", "continue"]
)
_DIGIT = re.compile(r"\d")
_CHOICES = re.compile(r"\n *\(?[a-d][).:] ")
_QUESTION_OPENERS = frozenset(
    [
        "what",
        "why",
        "how",
        "who",
        "when",
        "where",
        "which",
        "can",
        "could",
        "should",
        "would",
        "is",
        "are",
        "do",
        "does",
        "did",
        "tell",
        "explain",
        "describe",
        "give",
        "help",
        "hi",
        "hello",
        "hey",
        "please",
    ]
)


def request_kind(text: str) -> RequestKind:
    """The kind of the request whose last user turn is `text` (see the module docstring)."""
    if len(text) > HEAD_CHARS + TAIL_CHARS:
        text = text[:HEAD_CHARS] + "\n" + text[-TAIL_CHARS:]
    lowered = text.lower()
    words = lowered.translate(_SPACES).split()
    vocabulary = frozenset(words)
    if any(mark in lowered for mark in _CODE_MARKS) or not vocabulary.isdisjoint(_CODE_WORDS):
        return "code"
    if _CHOICES.search(lowered):
        # a multiple-choice question, whatever its subject
        return "other"
    if _DIGIT.search(lowered) is not None and (
        _ARITHMETIC.search(lowered) is not None
        or (
            not vocabulary.isdisjoint(_MATH_WORDS)
            or any(phrase in lowered for phrase in _MATH_PHRASES)
        )
    ):
        return "math"
    if not vocabulary.isdisjoint(_EXTRACTION_WORDS) or any(
        phrase in lowered for phrase in _EXTRACTION_PHRASES
    ):
        return "extraction"
    if not vocabulary.isdisjoint(_WRITING_WORDS) or (
        not vocabulary.isdisjoint(_WRITING_VERBS) and not vocabulary.isdisjoint(_WRITING_NOUNS)
    ):
        return "writing"
    if "?" in lowered or (words and words[0] in _QUESTION_OPENERS):
        return "chat"
    return "other"
