"""A serving process settles its heap once started: start-up objects frozen out of the
cyclic collector's view, and its young generation run less often. Each case runs in its
own interpreter, since the collector's settings belong to the whole process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from gateway.pipeline.runtime import YOUNG_GENERATION_THRESHOLD
from tests.pipeline.support import one_model_policy, write_config

SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, sys
    from gateway.pipeline.runtime import GatewayRuntime
    from gateway.settings import load_settings

    async def main():
        settings = load_settings(sys.argv[1], env={"FAKE_UPSTREAM_KEY": "sk-fake-0123456789"})
        runtime = GatewayRuntime(settings, serving_process=sys.argv[2] == "1")
        await runtime.start()
        state = {"frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0]}
        await runtime.stop()
        print(json.dumps(state))

    asyncio.run(main())
    """
)


def started(tmp_path: Path, serving: bool) -> dict[str, int]:
    config = write_config(tmp_path, "http://127.0.0.1:9/v1", one_model_policy())
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config), "1" if serving else "0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    state: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return state


def test_a_serving_process_freezes_its_start_up_heap_and_runs_the_young_generation_less(
    tmp_path: Path,
) -> None:
    state = started(tmp_path, serving=True)
    assert state["frozen"] > 10_000, "the imports and settings are out of the collector's view"
    assert state["young"] == YOUNG_GENERATION_THRESHOLD


def test_a_runtime_in_someone_elses_process_leaves_the_collector_alone(tmp_path: Path) -> None:
    state = started(tmp_path, serving=False)
    assert state == {"frozen": 0, "young": 700}
