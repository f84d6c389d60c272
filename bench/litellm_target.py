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
# the release the issue's and docs/performance.md's rows were measured with (1.110.2's
# `proxy` extra does not resolve on PyPI)
LITELLM = "litellm[proxy]==1.108.7"


def ensure_installed() -> Path:
    binary = VENV / "bin" / "litellm"
    if not binary.exists():
        print(f"Installing {LITELLM} into {VENV} (first use only)...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        uv = Path(sys.executable).with_name("uv")  # the project's venv has uv (Makefile)
        if uv.exists():
            install = [str(uv), "pip", "install", "--python", str(VENV / "bin" / "python")]
        else:
            install = [str(VENV / "bin" / "pip"), "install", "--quiet"]
        subprocess.run([*install, LITELLM], check=True)
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
