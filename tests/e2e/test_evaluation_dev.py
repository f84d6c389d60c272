"""Online evaluation in dev mode (`make dev`: config/dev.yaml, policies/dev.yaml, the
in-memory store): route `auto` is evaluated over the emulated models, the emulator's judge
answers give verdicts, labels keep only a hash of the prompt (content logging is off), and
`gateway route quality` reads them from the running gateway."""

from __future__ import annotations

import subprocess
import sys

import httpx
import openai

from tests.e2e.support import wait_for
from tests.support.dev_gateway import ADMIN_KEY, DEV_KEY, REPO, DevGateway


def labels(gateway: DevGateway) -> list[dict[str, object]]:
    response = httpx.get(
        gateway.url + "/admin/evaluation/labels",
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    data: list[dict[str, object]] = response.json()["data"]
    return data


def test_dev_mode_judges_a_share_of_auto_and_keeps_no_prompt_text(
    shared_dev_gateway: DevGateway,
) -> None:
    client = openai.OpenAI(base_url=shared_dev_gateway.base_url, api_key=DEV_KEY, max_retries=0)
    before = len(labels(shared_dev_gateway))
    prompt = "Tell me about evaluation in dev mode, please."
    # a fifth of `auto`'s answers are sampled: 40 requests give a few labels, surely
    for n in range(40):
        client.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": f"{prompt} ({n})"}], max_tokens=16
        )
    assert wait_for(lambda: len(labels(shared_dev_gateway)) > before, timeout=30)
    judged = [x for x in labels(shared_dev_gateway) if x["metric"] == "judged"]
    assert judged
    for label in judged:
        assert label["route"] == "auto" and label["reference_model"] == "emulated-llama"
        assert label["prompt"] == "" and len(str(label["prompt_sha256"])) == 64
        assert label["verdicts"] != ["", ""] or label["served_model"] == "emulated-llama"

    shown = subprocess.run(
        [
            sys.executable, "-m", "gateway.cli.main", "route", "quality",
            "--config", "config/dev.yaml", "--url", shared_dev_gateway.url,
        ],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "route auto: saved $" in shown.stdout
    assert "against always-emulated-llama at measured quality" in shown.stdout
