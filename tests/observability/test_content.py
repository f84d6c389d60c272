"""The access log's copy of a conversation: attachments' payloads become a note of their
size; the request the pipeline holds is left as it was."""

from __future__ import annotations

import msgspec

from gateway.observability.content import loggable_messages
from gateway.wire.openai import Message


def messages(*items: dict[str, object]) -> list[Message]:
    return msgspec.convert(list(items), list[Message])


def test_a_conversation_without_attachments_is_logged_as_it_is() -> None:
    plain = messages(
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    )
    assert loggable_messages(plain) == plain


def test_payloads_are_replaced_in_the_copy_only() -> None:
    held = messages(
        {"role": "user", "content": "first"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/jpeg;base64,QUJD", "detail": "low"},
                },
                {"type": "file", "file": {"file_id": "file-123"}},
            ],
        },
    )
    before = msgspec.json.encode(held)

    logged = msgspec.to_builtins(loggable_messages(held))

    assert logged[0] == {"role": "user", "content": "first"}
    assert logged[1]["content"][1] == {
        "type": "image_url",
        "image_url": {
            "url": "data:image/jpeg;base64,<omitted by the access log: 4 characters>",
            "detail": "low",
        },
    }
    # a file named by id holds no payload: kept
    assert logged[1]["content"][2] == {"type": "file", "file": {"file_id": "file-123"}}
    assert msgspec.json.encode(held) == before


def test_any_case_of_data_and_a_url_without_a_comma_are_left_out_too() -> None:
    held = messages(
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "DATA:image/png;base64,QUJDRA=="}},
                {"type": "image_url", "image_url": {"url": "data:QUJDRA=="}},
            ],
        }
    )
    parts = msgspec.to_builtins(loggable_messages(held))[0]["content"]
    assert [p["image_url"]["url"] for p in parts] == [
        "DATA:image/png;base64,<omitted by the access log: 8 characters>",
        "<omitted by the access log: 13 characters>",
    ]
