"""What `gateway route label` reads: the requests to label (JSON lines, or the gateway's
own access log written with `server.log_content: true`), checked before any call is
sent, and the ids a previous run already wrote to --out."""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from gateway.cli.fitting_input import InputError, numbered_lines
from gateway.cli.route_score import chat_request
from gateway.observability.content import OMITTED_MARK
from gateway.observability.logs import ACCESS_LOGGER
from gateway.routing.learned.judging import JUDGE_SYSTEM
from gateway.routing.learned.scoring import scoring_text


@dataclass(frozen=True)
class Request:
    """One request to label: its id as given, the messages sent to both models, the text
    the scorer reads and the conversation the judge is shown."""

    ident: object
    messages: list[Any]
    prompt: str
    conversation: list[tuple[str, str]]
    user_turns: list[str]
    source: str | None

    @property
    def key(self) -> str:
        # 1 and "1" are different ids
        return json.dumps(self.ident)


def read_requests(files: list[Path]) -> list[Request]:
    """Every request of the files, checked before anything is sent (a bad line found
    half-way through would have cost the calls before it)."""
    requests: list[Request] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for where, line in numbered_lines(files):
        try:
            request = _parse(line)
        except InputError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if request.key in seen:
            problems.append(f"{where}: id {request.key} repeats {seen[request.key]}")
            continue
        seen[request.key] = where
        requests.append(request)
    if problems:
        more = f"\n(and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise InputError("\n".join(problems[:10]) + more)
    if not requests:
        raise InputError("no requests in " + ", ".join(str(f) for f in files))
    return requests


def read_access_log(files: list[Path], route: str | None) -> tuple[list[Request], Counter[str]]:
    """The requests of the gateway's access log that can be labelled: answered (status
    200), with their messages logged, on `route` when one is named, each distinct
    conversation once (its first request id). Everything else is counted by reason."""
    requests: list[Request] = []
    skipped: Counter[str] = Counter()
    seen: set[str] = set()
    ids: set[str] = set()
    for _, line in numbered_lines(files):
        try:
            item = json.loads(line)
        except ValueError:
            skipped["not a JSON line"] += 1
            continue
        if not isinstance(item, dict) or item.get("logger") != ACCESS_LOGGER:
            skipped["not an access line"] += 1
            continue
        content = item.get("content")
        if not isinstance(content, dict) or not isinstance(content.get("messages"), list):
            skipped["no messages (is server.log_content on?)"] += 1
            continue
        if item.get("status") != 200:
            skipped["not answered (status not 200)"] += 1
            continue
        if route is not None and item.get("route") != route:
            skipped[f"another route than {route}"] += 1
            continue
        if _is_judging(content["messages"]):
            skipped["this command's own judge call"] += 1
            continue
        if _has_omitted_payload(content["messages"]):
            # the models would be asked about an attachment the log no longer holds
            skipped["an image, audio or file the log did not keep"] += 1
            continue
        conversation = json.dumps(content["messages"], sort_keys=True)
        if conversation in seen:
            skipped["a repeat of an earlier conversation"] += 1
            continue
        try:
            request = _request({"id": item.get("request_id"), "messages": content["messages"]})
        except InputError as exc:
            skipped[str(exc)] += 1
            continue
        if request.key in ids:
            skipped["a request id seen before"] += 1
            continue
        seen.add(conversation)
        ids.add(request.key)
        requests.append(request)
    if not requests:
        raise InputError(
            "no request to label in " + ", ".join(str(f) for f in files) + _listed(skipped)
        )
    return requests, skipped


def _is_judging(messages: list[Any]) -> bool:
    """A judge call this command sent through the gateway (its answer calls repeat the
    labelled conversations, so they are left out as repeats)."""
    first = messages[0] if messages else None
    return isinstance(first, dict) and first.get("content") == JUDGE_SYSTEM


def _has_omitted_payload(messages: list[Any]) -> bool:
    for message in messages:
        parts = message.get("content") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            continue
        for part in parts:
            if not isinstance(part, dict):
                continue
            for field, payload in (
                ("image_url", "url"),
                ("input_audio", "data"),
                ("file", "file_data"),
            ):
                inner = part.get(field)
                value = inner.get(payload) if isinstance(inner, dict) else None
                if isinstance(value, str) and OMITTED_MARK in value:
                    return True
    return False


def _listed(skipped: Counter[str]) -> str:
    return "".join(f"\n  {count} x {reason}" for reason, count in skipped.most_common())


def print_skipped(out: IO[str], skipped: Counter[str], kept: int) -> None:
    out.write(f"{kept} distinct requests to label from the access log")
    out.write(f"; left out:{_listed(skipped)}\n" if skipped else "\n")


def _parse(line: str) -> Request:
    try:
        item = json.loads(line)
    except ValueError as exc:
        raise InputError(f"not JSON: {exc}") from None
    return _request(item)


def _request(item: object) -> Request:
    if not isinstance(item, dict):
        raise InputError('expected {"id": ..., "messages": [...]} or {"id": ..., "prompt": "..."}')
    ident = item.get("id")
    if not isinstance(ident, str | int) or isinstance(ident, bool) or ident == "":
        raise InputError('expected an "id" (a string or an integer)')
    messages = item.get("messages")
    if messages is None and isinstance(item.get("prompt"), str):
        messages = [{"role": "user", "content": item["prompt"]}]
    if not isinstance(messages, list):
        raise InputError('expected "messages" (a list) or "prompt" (a string)')
    decoded = chat_request("label", messages)
    if isinstance(decoded, str):
        raise InputError(decoded)
    if decoded.messages[-1].role != "user":
        raise InputError("the conversation must end with a user message (the one to answer)")
    prompt = scoring_text(decoded)
    if not prompt.strip():
        raise InputError("the last user message has no text")
    source = item.get("source")
    if source is not None and not isinstance(source, str):
        raise InputError('"source" must be a string')
    return Request(
        ident=ident,
        messages=messages,
        prompt=prompt,
        conversation=[(m.role, m.text()) for m in decoded.messages],
        user_turns=[m.text() for m in decoded.messages if m.role == "user"],
        source=source,
    )


def already_labelled(path: Path) -> set[str]:
    """The ids already in --out. A last line cut short (a run killed while writing it)
    is dropped from the file, so that request is labelled again; any other line that is
    not one of this command's labels is refused, and the file left as it is."""
    if not path.exists():
        return set()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"--out {path}: not UTF-8 text; is it a labelled-prompts file?") from None
    lines = text.splitlines()
    cut_short = bool(text) and not text.endswith("\n")
    done: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            float(item["strong_quality"])
            done.add(json.dumps(item["id"]))
        except (ValueError, KeyError, TypeError):
            if cut_short and number == len(lines):
                print(f"{path}: dropped its last line, cut short; labelled again", file=sys.stderr)
                path.write_text("".join(kept + "\n" for kept in lines[:-1]), encoding="utf-8")
                return done
            raise InputError(
                f"--out {path}:{number}: not a line `route label` wrote; name another --out"
            ) from None
    if cut_short:
        # a whole last line without its newline: the next label must not join it
        with path.open("a", encoding="utf-8") as out:
            out.write("\n")
    return done
