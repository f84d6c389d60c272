"""Fixtures for tests against real llama-server replicas (llama.cpp's C++ server).

The server is never built here: compiling llama.cpp takes many minutes, so these tests
use the build `make real-backend` left in `.cache/llamacpp/` (or `$GATEWAY_LLAMACPP_CACHE`)
and skip, saying so, where there is none (a fresh clone, CI). The tiny model is generated
from a seed on first use and kept beside the build.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from tests.real_backend.support import pool_gateway
from tests.support.gateway_process import GatewayProcess
from tools.llamacpp.build import Layout, finished_build, why_not_built
from tools.llamacpp.replicas import LlamaServer, ServerOptions, running_replicas

MODEL_SEED = 0

Replicas = Callable[..., AbstractContextManager[list[LlamaServer]]]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_backend: needs the llama-server build `make real-backend` caches"
    )


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    layout = Layout.default()
    if finished_build(layout) is None:
        pytest.skip(why_not_built(layout))
    return layout.server


@pytest.fixture(scope="session")
def tiny_model_path(llama_server_binary: Path) -> Path:
    # imported here: gguf costs every worker's collection 0.4 s, and most runs skip these
    from tools.llamacpp.tiny_model import Shape, tiny_model

    layout = Layout.default()
    return tiny_model(layout.models, layout.vocabulary, seed=MODEL_SEED, shape=Shape())


@pytest.fixture
def llama_replicas(llama_server_binary: Path, tiny_model_path: Path) -> Replicas:
    """`llama_replicas(count, parallel=2)`: a context manager over fresh, ready replicas
    (cold caches for each test), stopped on exit."""

    def start(count: int, parallel: int = 2, **options: Any) -> Any:
        server_options = ServerOptions(parallel=parallel, **options)
        return running_replicas(llama_server_binary, tiny_model_path, count, server_options)

    return start


@pytest.fixture
def gateway_over() -> Iterator[Callable[..., GatewayProcess]]:
    """`gateway_over(urls, balancer, **replica_settings)`: a started gateway, stopped after."""
    started: list[GatewayProcess] = []

    def start(urls: list[str], balancer: str = "prefix_affinity", **replicas: Any) -> Any:
        gateway = pool_gateway(urls, balancer, **replicas).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.stop()
