"""TaskFinder finds the task running its caller, as asyncio.current_task() does, across
tasks, loops run one after another, and threads running loops of their own."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.pipeline.running_task import TaskFinder


def test_each_task_finds_itself_on_the_kept_loop() -> None:
    finder = TaskFinder()

    async def whoami() -> bool:
        await asyncio.sleep(0)
        return finder.current() is asyncio.current_task()

    async def run() -> list[bool]:
        return list(await asyncio.gather(*(whoami() for _ in range(5))))

    assert asyncio.run(run()) == [True] * 5


def test_a_later_loop_is_found_again_after_the_first_closed() -> None:
    finder = TaskFinder()
    seen: list[asyncio.AbstractEventLoop] = []

    async def run() -> None:
        task = finder.current()
        assert task is asyncio.current_task()
        seen.append(task.get_loop())

    asyncio.run(run())
    asyncio.run(run())
    assert seen[0] is not seen[1]


def test_a_loop_in_another_thread_finds_its_own_task() -> None:
    finder = TaskFinder()
    found: list[bool] = []
    other_inside = threading.Event()
    release_other = threading.Event()

    async def other_thread() -> None:
        found.append(finder.current() is asyncio.current_task())
        other_inside.set()
        release_other.wait(5)  # holds its task running while the main thread asks
        found.append(finder.current() is asyncio.current_task())

    async def main_thread() -> None:
        assert other_inside.wait(5)
        found.append(finder.current() is asyncio.current_task())
        release_other.set()

    thread = threading.Thread(target=asyncio.run, args=(other_thread(),))
    thread.start()
    asyncio.run(main_thread())
    thread.join(5)
    assert found == [True, True, True]


def test_outside_a_task_it_says_so() -> None:
    with pytest.raises(RuntimeError):
        TaskFinder().current()
