"""A throwaway 3-node Redis Cluster (3 primaries, no replicas) on free ports."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

from tests.support.redis_server import RedisServer, free_port

CLUSTER_BUS_OFFSET = 10_000


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        port = free_port()
        if port + CLUSTER_BUS_OFFSET < 65_536 and _port_is_free(port + CLUSTER_BUS_OFFSET):
            return port
        port = 20_000 + free_port() % 30_000
        if _port_is_free(port) and _port_is_free(port + CLUSTER_BUS_OFFSET):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster3:
    def __init__(self) -> None:
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not on PATH")
        for _ in range(3):
            node = RedisServer(
                port=cluster_port(),
                extra_args=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ),
            )
            node.start()
            self.nodes.append(node)
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [
                subprocess.run(
                    [cli, "-p", str(node.port), "cluster", "info"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                for node in self.nodes
            ]
            if all("cluster_state:ok" in state for state in states):
                return
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not become ready")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
