"""What of a conversation the access log keeps (`server.log_content: true`): every
message as the pipeline holds it, except the payloads of images, audio and files.

An inline image or a PDF is hundreds of kilobytes of base64: encoding and masking it on
the event loop would cost a request in proportion to its attachments, and the log would
grow by megabytes a line. Each payload is replaced by a note of its size (`OMITTED`),
in place, so the line still shows the part's type, media type, file name or file id.
Image URLs that are links (not `data:`) are short and kept.
"""

from __future__ import annotations

import msgspec

from gateway.wire.openai import AudioPart, FilePart, ImagePart, ImageURL, InputAudio, Message

# what stands for a payload, and what a reader of the log recognises it by
OMITTED = "<omitted by the access log: {} characters>"
OMITTED_MARK = "<omitted by the access log:"


def loggable_messages(messages: list[Message]) -> list[Message]:
    """`messages` with every attachment's payload replaced; the same list when there is
    none (the common case costs one type check a message)."""
    if all(not isinstance(m.content, list) for m in messages):
        return messages
    out: list[Message] = []
    for message in messages:
        content = message.content
        if isinstance(content, list) and any(
            isinstance(p, ImagePart | AudioPart | FilePart) for p in content
        ):
            parts = [_without_payload(part) for part in content]
            message = msgspec.structs.replace(message, content=parts)
        out.append(message)
    return out


def _without_payload(part: object) -> object:
    if isinstance(part, ImagePart) and part.image_url.url[:5].lower() == "data:":
        url = part.image_url.url
        head, comma, data = url.partition(",")
        # no comma: not a well-formed data URL, and all of it may be payload
        logged = f"{head},{OMITTED.format(len(data))}" if comma else OMITTED.format(len(url))
        return ImagePart(image_url=ImageURL(url=logged, detail=part.image_url.detail))
    if isinstance(part, AudioPart):
        audio = part.input_audio
        return AudioPart(
            input_audio=InputAudio(data=OMITTED.format(len(audio.data)), format=audio.format)
        )
    if isinstance(part, FilePart) and isinstance(part.file.get("file_data"), str):
        kept = dict(part.file)
        kept["file_data"] = OMITTED.format(len(part.file["file_data"]))
        return FilePart(file=kept)
    return part
