"""A real local Redis Cluster for tests and benches: ``redis-server --cluster-enabled yes`` on private ports (3
masters with a replica each by default, made by ``redis-cli --cluster create``), and :meth:`LocalCluster.stop`
to tear it down. Needs ``redis-server`` and ``redis-cli`` on PATH (``scripts/ensure-redis-tools``). The suite's
``redis_cluster`` fixture (tests/conftest.py) starts one per session; ``bench/cluster.py`` compares 1 and 3
masters."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis
from redis.cluster import ClusterNode, RedisCluster

MASTERS = 3


def _free(port: int) -> bool:
    for p in (port, port + 10000):  # the cluster bus listens on port + 10000
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _ports(n: int) -> list[int]:
    while True:
        base = random.randrange(20000, 29000, 10)
        ports = [base + i for i in range(n)]
        if all(_free(p) for p in ports):
            return ports


class LocalCluster:
    """``masters`` redis-servers in cluster mode under ``directory``, each with ``replicas`` replicas;
    ``url`` is the seed URL of the state store (``redis+cluster://``)."""

    def __init__(self, directory: Path, masters: int = MASTERS, replicas: int = 1) -> None:
        self.dir = directory
        self.n_masters, self.n_replicas = masters, replicas
        self.ports = _ports(masters * (1 + replicas))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def _start_node(self, port: int) -> None:
        node_dir = self.dir / str(port)
        node_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1500",
            "--dir", str(node_dir), "--appendonly", "no", "--save", "", "--protected-mode", "no",
        ]  # fmt: skip
        self.procs[port] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def start(self, timeout: float = 60) -> LocalCluster:
        for port in self.ports:
            self._start_node(port)
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while not _pings(port):
                if time.monotonic() > deadline:
                    raise AssertionError(f"cluster node {port} does not answer")
                time.sleep(0.05)
        if self.n_masters >= 3:
            create = [
                shutil.which("redis-cli") or "redis-cli", "--cluster", "create",
                *(f"127.0.0.1:{p}" for p in self.ports), "--cluster-replicas", str(self.n_replicas), "--cluster-yes",
            ]  # fmt: skip
            done = subprocess.run(create, capture_output=True, timeout=timeout)
            if done.returncode != 0:
                raise AssertionError(f"redis-cli --cluster create failed: {done.stdout!r} {done.stderr!r}")
        else:
            self._create_small()
        while not self.healthy():
            if time.monotonic() > deadline:
                raise AssertionError("the cluster did not become healthy")
            time.sleep(0.1)
        return self

    def _create_small(self) -> None:
        """A cluster of fewer than 3 masters (``redis-cli --cluster create`` refuses one): the slots shared out by
        hand, the other nodes met and made replicas."""
        masters, others = self.ports[: self.n_masters], self.ports[self.n_masters :]
        share = 16384 // self.n_masters
        for i, port in enumerate(masters):
            last = 16383 if i == len(masters) - 1 else (i + 1) * share - 1
            node = redis.Redis(port=port)
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", i * share, last)  # type: ignore[no-untyped-call]
            node.execute_command("CLUSTER", "SET-CONFIG-EPOCH", i + 1)  # type: ignore[no-untyped-call]
        for port in self.ports[1:]:
            redis.Redis(port=port).execute_command("CLUSTER", "MEET", "127.0.0.1", self.ports[0])  # type: ignore[no-untyped-call]
        ids = [self._node_id(p) for p in masters]
        deadline = time.monotonic() + 30
        for i, port in enumerate(others):
            while True:  # a node can replicate a master once it knows it
                try:
                    redis.Redis(port=port).execute_command("CLUSTER", "REPLICATE", ids[i % len(ids)])  # type: ignore[no-untyped-call]
                    break
                except redis.ResponseError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def healthy(self) -> bool:
        """Every node says cluster_state:ok, every master and replica is up, and each replica follows its master."""
        try:
            for port in self.procs:
                info = redis.Redis(port=port, socket_timeout=2).cluster("info")
                if info.get("cluster_state") != "ok":
                    return False
            wanted = self.n_masters * self.n_replicas
            replicas = self.replicas()
            if len(self.masters()) != self.n_masters or len(replicas) != wanted:
                return False
            for port in replicas:  # each replica has done its first sync and follows its master
                info = redis.Redis(port=port, socket_timeout=2).info("replication")
                if info.get("master_link_status") != "up" or info.get("master_sync_in_progress"):
                    return False
            return True
        except redis.RedisError:
            return False

    def _roles(self) -> list[tuple[int, str]]:
        for port, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            try:
                nodes = redis.Redis(port=port, socket_timeout=2).execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
            except redis.RedisError:
                continue
            text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
            out = []
            for line in text.splitlines():
                parts = line.split()
                node_port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
                flags = parts[2]
                if "fail" in flags or "noaddr" in flags:
                    continue
                out.append((node_port, "master" if "master" in flags else "replica"))
            return out
        return []

    def masters(self) -> list[int]:
        return sorted(p for p, role in self._roles() if role == "master")

    def replicas(self) -> list[int]:
        return sorted(p for p, role in self._roles() if role == "replica")

    def client(self) -> RedisCluster:
        return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in self.ports[:3]])  # type: ignore[no-untyped-call]

    def replica_of(self, master: int) -> int:
        """The port of a replica of the master on ``master``."""
        node_id = self._node_id(master)
        for port in self.replicas():
            info = redis.Redis(port=port, socket_timeout=2).execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
            text = info.decode() if isinstance(info, bytes) else str(info)
            mine = next(line for line in text.splitlines() if "myself" in line.split()[2])
            if mine.split()[3] == node_id:
                return port
        raise LookupError(f"no replica of {master}")

    def _node_id(self, port: int) -> str:
        return str(redis.Redis(port=port, socket_timeout=2, decode_responses=True).execute_command("CLUSTER", "MYID"))  # type: ignore[no-untyped-call]

    def pause(self, port: int) -> None:
        """SIGSTOP one node (it stops reading replication; others see it silent)."""
        self.procs[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGCONT)

    def kill(self, port: int) -> None:
        """kill -9 one node."""
        proc = self.procs[port]
        proc.kill()
        proc.wait(timeout=10)

    def restart(self, port: int) -> None:
        """Start a node that was killed again, on its port and with its ``nodes.conf`` (none of its data: nothing
        is persisted): a master whose replica took over rejoins as that replica's replica, so the promoted master
        has a replica again."""
        self._start_node(port)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port, socket_timeout=1).ping())
    except redis.RedisError:
        return False
