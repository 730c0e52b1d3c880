"""Placement, as pure functions: which executor and port each replica of a gang gets.

A job is placed only when *all* its replicas fit at once (a gang) in the free capacity of
live executors; replicas may spread across executors. Each replica goes to the first
executor (in the order given: oldest announced first) with room for it: CPUs, memory,
accelerators of its type (an executor has one accelerator type, counted), and a free port
of the executor's announced range. Ports are never shared with a replica that holds its
executor (PENDING, RUNNING, or RESTARTING there). First fit is greedy, not optimal: a gang
that would fit with a cleverer packing may wait.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mldiag_schemas.replicas import Resources

_EPSILON = 1e-9


@dataclass(frozen=True)
class Demand:
    """One replica that needs a place."""

    pool: int
    index: int
    resources: Resources


@dataclass(frozen=True)
class Holding:
    """What a replica holds on an executor."""

    resources: Resources
    port: int | None


@dataclass
class Room:
    """An executor's free capacity and ports, updated as replicas are put on it."""

    executor_id: str
    address: str
    cpus: float
    memory_bytes: int
    accelerator_type: str
    accelerators: int
    free_ports: list[int] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        executor_id: str,
        address: str,
        capacity: Resources,
        first_port: int,
        port_count: int,
        holdings: Iterable[Holding] = (),
    ) -> "Room":
        """An executor with what its replicas already hold taken out."""
        room = cls(
            executor_id,
            address,
            capacity.cpus,
            capacity.memory_bytes,
            capacity.accelerator_type,
            capacity.accelerator_count,
        )
        taken: set[int] = set()
        for holding in holdings:
            room.take(holding.resources)
            if holding.port is not None:
                taken.add(holding.port)
        last = min(first_port + port_count, 65536)
        room.free_ports = [port for port in range(first_port, last) if port not in taken]
        return room

    def fits(self, need: Resources) -> bool:
        """Whether one replica needing ``need`` fits now (a free port included)."""
        return bool(self.free_ports) and self.could_fit(need)

    def could_fit(self, need: Resources) -> bool:
        """Whether ``need`` fits in the resources left, ports aside."""
        if need.cpus > self.cpus + _EPSILON or need.memory_bytes > self.memory_bytes:
            return False
        if need.accelerator_count == 0:
            return True
        return need.accelerator_type == self.accelerator_type and (
            need.accelerator_count <= self.accelerators
        )

    def take(self, need: Resources) -> None:
        """Count ``need`` as used."""
        self.cpus -= need.cpus
        self.memory_bytes -= need.memory_bytes
        if need.accelerator_count and need.accelerator_type == self.accelerator_type:
            self.accelerators -= need.accelerator_count


@dataclass(frozen=True)
class Slot:
    """Where a replica goes: an executor, its address, and a port there."""

    executor_id: str
    address: str
    port: int


def place_gang(
    demands: Sequence[Demand], rooms: Sequence[Room]
) -> dict[tuple[int, int], Slot] | None:
    """A slot for every demand, or None (and ``rooms`` untouched) if the gang does not fit.

    On success ``rooms`` are updated, so the next job is placed in what is left.
    """
    trial = [_copy(room) for room in rooms]
    slots: dict[tuple[int, int], Slot] = {}
    for demand in demands:
        room = next((room for room in trial if room.fits(demand.resources)), None)
        if room is None:
            return None
        room.take(demand.resources)
        port = room.free_ports.pop(0)
        slots[(demand.pool, demand.index)] = Slot(room.executor_id, room.address, port)
    for original, placed in zip(rooms, trial, strict=True):
        original.cpus, original.memory_bytes = placed.cpus, placed.memory_bytes
        original.accelerators, original.free_ports = placed.accelerators, placed.free_ports
    return slots


def place_one(demand: Demand, rooms: Sequence[Room], prefer: str | None) -> Slot | None:
    """A slot for one replica (a restart), on ``prefer`` if it fits there; ``rooms`` updated."""
    ordered = sorted(rooms, key=lambda room: room.executor_id != prefer)
    placed = place_gang([demand], ordered)
    return None if placed is None else placed[(demand.pool, demand.index)]


def first_unfittable(demands: Sequence[Demand], rooms: Sequence[Room]) -> Demand | None:
    """The first demand that fits on no executor even when they are all empty, else None;
    ``rooms`` must be whole (nothing taken out)."""
    for demand in demands:
        if not any(room.could_fit(demand.resources) for room in rooms):
            return demand
    return None


def _copy(room: Room) -> Room:
    return Room(
        room.executor_id,
        room.address,
        room.cpus,
        room.memory_bytes,
        room.accelerator_type,
        room.accelerators,
        list(room.free_ports),
    )
