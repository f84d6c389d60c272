"""`gateway route label`: label your own requests for `gateway route train`.

The shipped scorer ranks open chat from a source it never saw no better than a coin
(docs/learned-routing.md); trained on labels of a tenant's own traffic it can do better.
This command makes those labels: every request of the file is answered by the strong and
the weak model, then a judge model compares the two answers twice (each answer shown
first once: judges favour a position), and the verdicts become the `strong_quality` /
`weak_quality` line that `route train`, `route calibrate` and `route heads` read.

It is a client of an OpenAI-compatible endpoint, normally this gateway: the calls then
go through the tenant's key, limits, budget and ledger like any other traffic, and cost
what the ledger says. Labelled lines are appended as each request finishes, so a run that
stops (a failure, Ctrl-C) continues where it stopped when run again with the same --out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any

import httpx

from gateway.cli.fitting_input import InputError
from gateway.cli.label_input import (
    Request,
    already_labelled,
    print_skipped,
    read_access_log,
    read_requests,
)
from gateway.routing.learned.judging import (
    PairLabel,
    combine,
    judge_messages,
    read_verdict,
)

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_KEY_ENV = "GATEWAY_API_KEY"
# a busy gateway or provider (429, 5xx) is asked again, this many times in all, after
# its Retry-After (one over MAX_WAIT_SECONDS stops the run) or a doubling backoff
ATTEMPTS = 4
FIRST_BACKOFF_SECONDS = 0.5
MAX_WAIT_SECONDS = 30.0
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# a 429 that no wait will lift: the tenant's budget is spent
FATAL_CODES = frozenset({"insufficient_quota"})
# every later call would fail the same way: stop starting new requests
FATAL_STATUSES = {
    401: "the endpoint refused the API key (set it in ${env})",
    403: "the API key may not use this model",
    404: "the endpoint does not know this model",
}
# a judge's reasoning plus its verdict fits in this many tokens
JUDGE_MAX_TOKENS = 1024
REASON_CHARS = 200
# the wait between attempts (a test records it instead of sleeping)
pause = asyncio.sleep
# --limit's draw: fixed, so a rerun after a crash picks from the same order
LIMIT_SEED = 20


def register(actions: Any) -> None:
    label = actions.add_parser(
        "label",
        help="answer your requests with a strong and a weak model and judge them, for"
        " `route train`",
        description=__doc__.split("\n\n")[0],
    )
    given = label.add_mutually_exclusive_group(required=True)
    given.add_argument(
        "--data",
        type=Path,
        action="append",
        metavar="FILE.jsonl",
        help='requests, JSON lines {"id", "messages"} (as `route score` reads) or'
        ' {"id", "prompt"}; an optional "source" is kept (repeatable)',
    )
    given.add_argument(
        "--from-access-log",
        type=Path,
        action="append",
        metavar="FILE",
        help="the gateway's JSON access log, written with `server.log_content: true`: its"
        " answered requests, each distinct conversation once (repeatable)",
    )
    label.add_argument(
        "--route",
        metavar="NAME",
        help="with --from-access-log: only requests planned on this route",
    )
    label.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="FILE.jsonl",
        help="labelled prompts, appended; requests already in it are skipped",
    )
    label.add_argument("--strong", required=True, metavar="MODEL", help="the strong model")
    label.add_argument("--weak", required=True, metavar="MODEL", help="the weak model")
    label.add_argument(
        "--judge",
        required=True,
        metavar="MODEL",
        help="the model that compares the two answers; prefer a third model, as a judge"
        " favours its own answers",
    )
    label.add_argument(
        "--base-url", default=DEFAULT_BASE_URL, help=f"the endpoint (default {DEFAULT_BASE_URL})"
    )
    label.add_argument(
        "--api-key-env",
        default=DEFAULT_KEY_ENV,
        metavar="NAME",
        help=f"the environment variable holding the API key (default {DEFAULT_KEY_ENV})",
    )
    label.add_argument(
        "--concurrency", type=int, default=4, help="requests labelled at once (default 4)"
    )
    label.add_argument(
        "--max-tokens", type=int, default=1024, help="each answer's token cap (default 1024)"
    )
    label.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help="label at most N new requests this run, drawn at random (the same draw for the"
        " same input) so a sample of a long log spreads over all of it",
    )
    label.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per call (default 120)"
    )
    label.set_defaults(func=run_label)


class CallFailed(Exception):
    def __init__(self, reason: str, *, fatal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True)
class Answer:
    text: str
    completion_tokens: int
    cost_usd: Decimal | None


@dataclass
class Summary:
    total: int = 0
    already: int = 0
    labelled: int = 0
    strong_better: int = 0
    weak_better: int = 0
    ties: int = 0
    consistent: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    not_started: int = 0
    stopped_by: str | None = None
    tokens: Counter[str] = field(default_factory=Counter)
    cost_usd: Decimal | None = None

    def add_cost(self, answer: Answer) -> None:
        if answer.cost_usd is not None:
            self.cost_usd = (self.cost_usd or Decimal(0)) + answer.cost_usd


def run_label(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        if args.data is not None:
            requests = read_requests(args.data)
        else:
            requests, skipped = read_access_log(args.from_access_log, args.route)
            print_skipped(sys.stderr, skipped, len(requests))
        done = already_labelled(args.out)
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return 1
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    todo = [r for r in requests if r.key not in done]
    summary = Summary(total=len(requests), already=len(requests) - len(todo))
    if args.limit is not None and args.limit < len(todo):
        summary.not_started = len(todo) - args.limit
        drawn = set(random.Random(LIMIT_SEED).sample(range(len(todo)), args.limit))
        todo = [request for i, request in enumerate(todo) if i in drawn]
    key = os.environ.get(args.api_key_env, "")
    if not key.isascii():
        # never echoed: only the variable is named
        print(f"error: ${args.api_key_env} holds characters an API key cannot", file=sys.stderr)
        return 1
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a", encoding="utf-8") as out:
            asyncio.run(_label_all(todo, args, key, out, summary))
    except OSError as exc:
        print(f"error: {exc.filename or args.out}: {exc.strerror}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"\ninterrupted: {summary.labelled} labelled this run are in {args.out};"
            " run the same command again to continue",
            file=sys.stderr,
        )
        return 130
    _print(sys.stdout, summary, args)
    # requests --limit left for a later run are not a failure
    failed = bool(summary.failed) or summary.stopped_by is not None
    return 1 if failed else 0


def _check_args(args: argparse.Namespace) -> None:
    if args.route is not None and args.data is not None:
        raise InputError("--route filters --from-access-log; a --data file is labelled whole")
    if args.strong == args.weak:
        raise InputError("--strong and --weak name the same model")
    for name in ("concurrency", "max_tokens"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    if args.limit is not None and args.limit < 0:
        raise InputError("--limit must not be negative")
    if args.timeout <= 0:
        raise InputError("--timeout must be positive")
    try:
        url = httpx.URL(args.base_url)
        port = url.port
    except (httpx.InvalidURL, ValueError) as exc:
        raise InputError(f"--base-url {args.base_url}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise InputError(f"--base-url {args.base_url}: expected an http:// or https:// URL")
    if port is not None and not 0 < port < 65536:
        raise InputError(f"--base-url {args.base_url}: port {port} is out of range")
    if args.judge in (args.strong, args.weak):
        print(
            f"note: the judge {args.judge} is also one of the two answering models; judges"
            " favour their own answers, so a third model makes fairer labels",
            file=sys.stderr,
        )


async def _label_all(
    todo: list[Request], args: argparse.Namespace, key: str, out: IO[str], summary: Summary
) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    queue: asyncio.Queue[Request] = asyncio.Queue()
    for request in todo:
        queue.put_nowait(request)
    every = max(1, len(todo) // 20)
    timeout = httpx.Timeout(args.timeout, connect=min(args.timeout, 10.0))
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(
        base_url=args.base_url.rstrip("/"), headers=headers, timeout=timeout, limits=limits
    ) as client:
        caller = _Caller(client, args)

        async def worker() -> None:
            while not queue.empty():
                request = queue.get_nowait()
                if summary.stopped_by is not None:
                    summary.not_started += 1
                    continue
                try:
                    label = await _label_one(caller, request, summary)
                except CallFailed as failure:
                    summary.failed[failure.reason] += 1
                    if failure.fatal and summary.stopped_by is None:
                        summary.stopped_by = failure.reason
                    continue
                out.write(json.dumps(_line(request, label, args), ensure_ascii=False) + "\n")
                out.flush()
                _count(summary, label)
                if summary.labelled % every == 0:
                    print(f"labelled {summary.labelled} of {len(todo)}", file=sys.stderr)

        await asyncio.gather(*(worker() for _ in range(min(args.concurrency, len(todo)))))


async def _label_one(caller: _Caller, request: Request, summary: Summary) -> PairLabel:
    strong, weak = await _all(
        caller.answer("strong", caller.strong, request.messages),
        caller.answer("weak", caller.weak, request.messages),
    )
    # a judge call that failed fails the request: one order alone keeps its position bias
    verdicts = await _all(
        caller.judge(judge_messages(request.conversation, strong.text, weak.text)),
        caller.judge(judge_messages(request.conversation, weak.text, strong.text)),
    )
    for role, answer in (("strong", strong), ("weak", weak), *(("judge", v) for v in verdicts)):
        summary.tokens[role] += answer.completion_tokens
        summary.add_cost(answer)
    # a judge that answered without a verdict in one order leaves the other order's
    label = combine(read_verdict(verdicts[0].text), read_verdict(verdicts[1].text))
    if label is None:
        raise CallFailed(f"judge ({caller.judge_model}): no [[A]], [[B]] or [[C]] in either order")
    return label


async def _all(*calls: Coroutine[Any, Any, Answer]) -> list[Answer]:
    """Every call's answer, or the first failure (a fatal one first)."""
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, CallFailed)]
    if failures:
        raise min(failures, key=lambda f: not f.fatal)
    answers = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        answers.append(outcome)
    return answers


class _Caller:
    def __init__(self, client: httpx.AsyncClient, args: argparse.Namespace) -> None:
        self._client = client
        self.strong: str = args.strong
        self.weak: str = args.weak
        self.judge_model: str = args.judge
        self._max_tokens: int = args.max_tokens
        self._key_env: str = args.api_key_env

    async def answer(self, role: str, model: str, messages: list[Any]) -> Answer:
        body = {"model": model, "messages": messages, "max_tokens": self._max_tokens}
        return await self._complete(role, model, body)

    async def judge(self, messages: list[dict[str, str]]) -> Answer:
        body = {
            "model": self.judge_model,
            "messages": messages,
            "max_tokens": JUDGE_MAX_TOKENS,
            "temperature": 0,
        }
        return await self._complete("judge", self.judge_model, body)

    async def _complete(self, role: str, model: str, body: dict[str, Any]) -> Answer:
        where = f"{role} ({model})"
        reason = ""
        unreachable = False
        for attempt in range(ATTEMPTS):
            wait = FIRST_BACKOFF_SECONDS * 2**attempt
            try:
                response = await self._client.post("/chat/completions", json=body)
            except httpx.TimeoutException:
                reason, unreachable = f"{where}: timed out", False
            except httpx.HTTPError as exc:
                reason = f"{where}: cannot reach the endpoint ({type(exc).__name__})"
                unreachable = isinstance(exc, httpx.ConnectError)
            else:
                unreachable = False
                if response.status_code == 200:
                    return _answer(where, model, response)
                code, said = _error(response)
                reason = f"{where}: {response.status_code} {said}"
                if response.status_code in FATAL_STATUSES:
                    why = FATAL_STATUSES[response.status_code].replace(
                        "${env}", "$" + self._key_env
                    )
                    raise CallFailed(f"{reason} ({why})", fatal=True)
                if code in FATAL_CODES:
                    raise CallFailed(reason, fatal=True)
                if response.status_code not in RETRIED_STATUSES:
                    raise CallFailed(reason)
                asked = _retry_after(response)
                if asked is not None and asked > MAX_WAIT_SECONDS:
                    # a window this long (a daily limit, say) fails every request until it
                    # ends: stop, and let a later run continue
                    raise CallFailed(f"{reason} (asked to wait {asked:.0f} s)", fatal=True)
                wait = wait if asked is None else asked
            if attempt + 1 < ATTEMPTS:
                await pause(min(wait, MAX_WAIT_SECONDS))
        # an endpoint no attempt could connect to will not answer the next request either
        raise CallFailed(reason, fatal=unreachable)


def _answer(where: str, model: str, response: httpx.Response) -> Answer:
    try:
        payload = response.json()
        choice = payload["choices"][0]
        text = choice["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise CallFailed(f"{where}: not a chat completion") from None
    if not isinstance(text, str) or not text.strip():
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        raise CallFailed(f"{where}: no text in the answer (finish_reason {finish})")
    if "fallback-from=" in response.headers.get("x-gateway-route", ""):
        # another model answered: the label would be about it, not about `model`
        served = response.headers.get("x-gateway-model", "another model")
        raise CallFailed(f"{where}: answered by {served}, a fallback")
    usage = payload.get("usage") if isinstance(payload, dict) else None
    tokens = usage.get("completion_tokens", 0) if isinstance(usage, dict) else 0
    cost: Decimal | None = None
    try:
        header = response.headers.get("x-gateway-cost-usd")
        cost = Decimal(header) if header is not None else None
    except InvalidOperation:
        cost = None
    return Answer(text, tokens if isinstance(tokens, int) else 0, cost)


def _error(response: httpx.Response) -> tuple[str, str]:
    """The OpenAI-shaped error's code, and the code with its message, short (the status's
    reason phrase when the body is not such an error)."""
    try:
        error = response.json()["error"]
        code = str(error.get("code") or error.get("type") or "")
        message = str(error.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return "", response.reason_phrase
    text = f"{code}: {message}" if code else message
    return code, text[:REASON_CHARS]


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


def _line(request: Request, label: PairLabel, args: argparse.Namespace) -> dict[str, object]:
    line: dict[str, object] = {
        "id": request.ident,
        "prompt": request.prompt,
        "strong_quality": label.strong_quality,
        "weak_quality": label.weak_quality,
    }
    if request.source is not None:
        line["source"] = request.source
    if len(request.user_turns) > 1:
        # keeps a conversation's follow-ups in one fold (route train)
        line["turns"] = request.user_turns
    line |= {
        "strong_model": args.strong,
        "weak_model": args.weak,
        "judge": args.judge,
        "verdicts": list(label.verdicts),
    }
    return line


def _count(summary: Summary, label: PairLabel) -> None:
    summary.labelled += 1
    if label.strong_quality > 0.5:
        summary.strong_better += 1
    elif label.strong_quality < 0.5:
        summary.weak_better += 1
    else:
        summary.ties += 1
    summary.consistent += int(label.consistent)


def _print(out: IO[str], summary: Summary, args: argparse.Namespace) -> None:
    done = summary.already + summary.labelled
    out.write(
        f"labelled {summary.labelled} requests this run; {done} of {summary.total} are in"
        f" {args.out}\n"
    )
    if summary.labelled:
        out.write(
            f"  strong better on {summary.strong_better}, weak better on {summary.weak_better},"
            f" tie on {summary.ties}; both answer orders agreed on {summary.consistent}"
            f" ({summary.consistent / summary.labelled:.0%})\n"
        )
        tokens = ", ".join(
            f"{role} {summary.tokens[role]:,}" for role in ("strong", "weak", "judge")
        )
        cost = "" if summary.cost_usd is None else f"; cost ${summary.cost_usd:.4f}"
        out.write(f"  output tokens: {tokens}{cost}\n")
    if summary.failed:
        out.write(f"not labelled ({sum(summary.failed.values())}):\n")
        for reason, count in summary.failed.most_common():
            out.write(f"  {count} x {reason}\n")
    if summary.stopped_by is not None:
        out.write(f"stopped early: {summary.stopped_by}\n")
    if summary.not_started:
        out.write(f"{summary.not_started} requests not started (run again to continue)\n")
    if done < summary.total:
        out.write("run the same command again to label the rest\n")
    else:
        out.write(f"next: gateway route train --data {args.out} --out FILE.bin\n")
