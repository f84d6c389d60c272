"""LiteLLM's proxy as a comparison target (optional: `bench/overhead.py --litellm`).

It is installed on first use into its own venv (`.bench/litellm-venv`, outside the
project's environment) from PyPI, and pointed at the same upstreams, one worker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from bench.processes import REPO, Service, pinned

VENV = REPO / ".bench" / "litellm-venv"


def ensure_installed() -> Path:
    binary = VENV / "bin" / "litellm"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(VENV / "bin" / "pip"), "install", "--quiet", "litellm[proxy]"], check=True
        )
    return binary


def litellm(port: int, upstreams: dict[str, int], core: int | None, key: str) -> Service:
    binary = ensure_installed()
    folder = VENV.parent
    config = {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {
                    "model": "openai/bench-model",
                    "api_base": f"http://127.0.0.1:{upstream_port}/v1",
                    "api_key": "sk-bench",
                },
            }
            for name, upstream_port in upstreams.items()
        ],
        "general_settings": {"master_key": key},
        "litellm_settings": {"drop_params": True, "telemetry": False},
    }
    path = folder / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [str(binary), "--config", str(path), "--port", str(port), "--num_workers", "1"]
    return Service(
        "litellm",
        pinned(command, core),
        f"http://127.0.0.1:{port}/health/liveliness",
        env={"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False"},
    )
