"""Replica addresses for backends whose replicas do not live at the executor's address.

The scheduler writes every replica's address into its environment (``CLUSTER_SPEC``,
``TF_CONFIG``, ``MASTER_ADDR``, ``JAX_COORDINATOR_ADDRESS`` …) as ``<executor address>:<port>``,
one port per replica of the executor. A backend that spreads replicas over several hosts
(Ray nodes, Kubernetes pods) learns where each one lands before any process starts, and
rewrites those addresses: the port names the replica, so ``<address>:<port>`` becomes
``<its host>:<port>`` everywhere, and ``MASTER_ADDR`` follows ``MASTER_PORT``.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from mldiag_schemas.replicas import ReplicaKey


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """One replica of a job that this executor runs: its pool, index and port."""

    pool: int
    index: int
    port: int


def local_slots(env: Mapping[str, str], address: str, key: ReplicaKey, port: int) -> list[Slot]:
    """The job's replicas at ``address`` according to ``CLUSTER_SPEC`` (pool, then index
    order), the attempt's own among them even when ``CLUSTER_SPEC`` leaves it out."""
    slots: set[Slot] = {Slot(key.pool, key.index, port)}
    try:
        cluster = json.loads(env.get("CLUSTER_SPEC", "{}")).get("cluster", {})
    except (ValueError, AttributeError):
        cluster = {}
    if isinstance(cluster, dict):
        for name, hosts in cluster.items():
            match = re.fullmatch(r"workerpool(\d+)", str(name))
            if match is None or not isinstance(hosts, list):
                continue
            for index, host in enumerate(hosts):
                found_host, _, found_port = str(host).rpartition(":")
                if found_host == address and found_port.isdigit():
                    slots.add(Slot(int(match.group(1)), index, int(found_port)))
    # One slot per replica: should CLUSTER_SPEC disagree with the command, the command wins.
    mine = {(key.pool, key.index)}
    return sorted(s for s in slots if (s.pool, s.index) not in mine or s.port == port)


def rewrite_addresses(
    env: Mapping[str, str], address: str, hosts: Mapping[int, str]
) -> dict[str, str]:
    """``env`` with ``<address>:<port>`` replaced by ``<hosts[port]>:<port>`` for every port
    in ``hosts`` (in every value), and ``MASTER_ADDR`` moved with ``MASTER_PORT``."""
    if not hosts:
        return dict(env)
    pattern = re.compile(rf"(?<![\w.-]){re.escape(address)}:(\d+)(?![\d])")

    def replace(match: re.Match[str]) -> str:
        host = hosts.get(int(match.group(1)))
        return f"{host}:{match.group(1)}" if host is not None else match.group(0)

    rewritten = {name: pattern.sub(replace, value) for name, value in env.items()}
    master_port = env.get("MASTER_PORT", "")
    if env.get("MASTER_ADDR") == address and master_port.isdigit():
        rewritten["MASTER_ADDR"] = hosts.get(int(master_port), address)
    return rewritten
