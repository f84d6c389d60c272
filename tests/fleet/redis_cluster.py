"""A throwaway Redis Cluster of 3 masters with one replica each, on free ports, that a
test can fail over and kill a node of."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass

from redis.crc import key_slot

from tests.limits.cluster import cluster_port
from tests.support.redis_server import RedisServer

MASTERS = 3


@dataclass(frozen=True)
class ClusterNode:
    node_id: str
    port: int
    role: str  # "master" or "slave"
    master_id: str | None
    slots: tuple[tuple[int, int], ...]

    def serves(self, slot: int) -> bool:
        return any(low <= slot <= high for low, high in self.slots)


def _parse_nodes(text: str) -> list[ClusterNode]:
    nodes = []
    for line in text.strip().splitlines():
        parts = line.split()
        flags = parts[2].split(",")
        if "fail" in flags or "noaddr" in flags:
            continue
        slots = []
        for spec in parts[8:]:
            if spec.startswith("["):
                continue  # a slot in migration
            low, _, high = spec.partition("-")
            slots.append((int(low), int(high or low)))
        nodes.append(
            ClusterNode(
                node_id=parts[0],
                port=int(parts[1].split(":")[1].split("@")[0]),
                role="master" if "master" in flags else "slave",
                master_id=None if parts[3] == "-" else parts[3],
                slots=tuple(slots),
            )
        )
    return nodes


class RedisCluster6:
    def __init__(self, node_timeout_ms: int = 2000) -> None:
        self.servers: dict[int, RedisServer] = {}
        self.node_timeout_ms = node_timeout_ms
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is not on PATH")
        self.cli = cli

    @property
    def url(self) -> str:
        """One live seed address; clients discover the rest."""
        return self.servers[self.live_ports()[0]].url

    def live_ports(self) -> list[int]:
        return [port for port, server in self.servers.items() if server.process is not None]

    def command(self, port: int, *args: str) -> str:
        result = subprocess.run(
            [self.cli, "-p", str(port), *args], capture_output=True, text=True, timeout=10
        )
        return result.stdout

    def start(self) -> None:
        for _ in range(MASTERS * 2):
            server = RedisServer(
                port=cluster_port(),
                extra_args=(
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    # a master waits this long for more replicas before it sends its
                    # first full sync (5 s by default): one replica each, nothing to wait for
                    "--repl-diskless-sync-delay", "0",
                ),
            )  # fmt: skip
            server.start()
            self.servers[server.port] = server
        addresses = [f"127.0.0.1:{port}" for port in self.servers]
        subprocess.run(
            [self.cli, "--cluster", "create", *addresses, "--cluster-replicas", "1",
             "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.wait_healthy(masters=MASTERS, replicas=MASTERS)

    def nodes(self, seen_from: int | None = None) -> list[ClusterNode]:
        port = seen_from if seen_from is not None else self.live_ports()[0]
        return _parse_nodes(self.command(port, "cluster", "nodes"))

    def wait_healthy(self, masters: int, replicas: int, timeout: float = 30) -> None:
        """Every live node says cluster_state:ok and sees the expected roles and links."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ok = all(
                "cluster_state:ok" in self.command(port, "cluster", "info")
                for port in self.live_ports()
            )
            views = [self.nodes(port) for port in self.live_ports()]
            roles_agree = all(
                sum(n.role == "master" and n.slots != () for n in view) == masters
                and sum(n.role == "slave" for n in view) == replicas
                for view in views
            )
            synced = all(
                "master_link_status:up" in self.command(n.port, "info", "replication")
                for n in views[0]
                if n.role == "slave"
            )
            if ok and roles_agree and synced:
                return
            time.sleep(0.1)
        nodes = self.command(self.live_ports()[0], "cluster", "nodes")
        raise RuntimeError(f"the Redis Cluster did not settle:\n{nodes}")

    def master_of(self, key: str) -> ClusterNode:
        slot = key_slot(key.encode())
        (master,) = [n for n in self.nodes() if n.role == "master" and n.serves(slot)]
        return master

    def replica_of(self, master: ClusterNode) -> ClusterNode:
        return next(n for n in self.nodes() if n.master_id == master.node_id)

    def failover(self, replica: ClusterNode, timeout: float = 30) -> None:
        """CLUSTER FAILOVER on `replica`: it takes over its master's slots once it has
        every write, and every node agrees on it."""
        assert "OK" in self.command(replica.port, "cluster", "failover")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            views = [self.nodes(port) for port in self.live_ports()]
            if all(
                any(n.node_id == replica.node_id and n.role == "master" for n in view)
                for view in views
            ):
                return
            time.sleep(0.05)
        raise RuntimeError("the failover did not complete")

    def kill(self, port: int) -> None:
        self.servers[port].stop(kill=True)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()
