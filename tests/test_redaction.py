"""The one redaction step: every form a provider quotes a key in, and nothing else."""

from __future__ import annotations

from gateway.errors import UpstreamRejected
from gateway.redaction import REDACTED, SecretRedactor, secret_header

KEY = "sk-proj-Q7wE9rT1yU3iO5pA7sD9fG1hJ3kL5zX7cV9bN1mQ"


def test_whole_and_masked_quotes_are_redacted() -> None:
    redactor = SecretRedactor([KEY])
    assert redactor.text(f"Incorrect API key provided: {KEY}.") == (
        f"Incorrect API key provided: {REDACTED}."
    )
    starred = f"{KEY[:8]}{'*' * 20}{KEY[-4:]}"
    assert redactor.text(f"key {starred} denied") == f"key {REDACTED} denied"
    assert redactor.text(f"key sk-...{KEY[-4:]} denied") == f"key {REDACTED} denied"
    assert redactor.text(f'{{"key": "{KEY}"}}') == f'{{"key": "{REDACTED}"}}'


def test_ordinary_text_is_left_alone() -> None:
    redactor = SecretRedactor([KEY])
    text = "The model 'gpt-4.1' is overloaded... try again (error 503)"
    assert redactor.text(text) == text
    # the key's last four alone, not behind a mask, is ordinary text
    assert redactor.text(f"code {KEY[-4:]}") == f"code {KEY[-4:]}"


def test_words_that_share_a_keys_start_are_not_the_key() -> None:
    key = "upstream-7Hq2Lx9Vb4Nc8Zr1Wt6Yp3"
    redactor = SecretRedactor([key])
    own = "The upstream for provider 'gpu' timed out; upstream-timeout after 30 s"
    assert redactor.text(own) == own
    assert redactor.text("upstreams upstream_error") == "upstreams upstream_error"
    assert redactor.text("waiting for upstream...") == "waiting for upstream..."
    # the key itself, and its start behind a mask, still go
    assert redactor.text(f"bad key {key}") == f"bad key {REDACTED}"
    assert redactor.text(f"bad key {key[:10]}****{key[-4:]}") == f"bad key {REDACTED}"
    assert redactor.text(f"bad key {key[:12]}...") == f"bad key {REDACTED}"


def test_secrets_too_short_to_be_credentials_are_ignored() -> None:
    assert SecretRedactor(["abc", ""]).text("abc def") == "abc def"
    assert SecretRedactor([]).text("anything") == "anything"


def test_an_error_is_redacted_in_message_and_param() -> None:
    error = UpstreamRejected(f"bad key {KEY}", status=400, provider="openai", param=KEY)
    SecretRedactor([KEY]).error(error)
    assert KEY not in error.message and error.param == REDACTED
    assert error.to_json().count(KEY.encode()) == 0


def test_credential_headers_are_recognised() -> None:
    assert secret_header("x-api-key") and secret_header("Authorization")
    assert secret_header("x-goog-api-key") and not secret_header("anthropic-version")
