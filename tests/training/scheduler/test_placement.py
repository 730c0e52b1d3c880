"""Placement as pure functions: gangs, fits, ports, accelerators."""

from mldiag_schemas.replicas import Resources
from mldiag_training.scheduler.placement import (
    Demand,
    Holding,
    Room,
    first_unfittable,
    place_gang,
    place_one,
)

GIB = 1024**3


def _res(cpus: float, gib: int = 1, gpu: str = "", gpus: int = 0) -> Resources:
    return Resources(
        cpus=cpus, memory_bytes=gib * GIB, accelerator_type=gpu, accelerator_count=gpus
    )


def _room(name: str, cpus: float, gib: int = 16, ports: int = 10, **kw: object) -> Room:
    capacity = _res(cpus, gib, str(kw.get("gpu", "")), int(str(kw.get("gpus", 0))))
    holdings = kw.get("holdings", ())
    assert isinstance(holdings, (list, tuple))
    return Room.of(name, f"{name}.local", capacity, 5000, ports, holdings)


def test_a_gang_spreads_across_executors() -> None:
    rooms = [_room("a", 2), _room("b", 2)]
    slots = place_gang([Demand(0, 0, _res(2)), Demand(1, 0, _res(2))], rooms)
    assert slots is not None
    assert {slot.executor_id for slot in slots.values()} == {"a", "b"}
    assert (rooms[0].cpus, rooms[1].cpus) == (0, 0)


def test_a_gang_that_does_not_fit_takes_nothing() -> None:
    rooms = [_room("a", 2), _room("b", 1)]
    demands = [Demand(0, 0, _res(2)), Demand(1, 0, _res(2))]
    assert place_gang(demands, rooms) is None
    assert (rooms[0].cpus, rooms[1].cpus, rooms[0].free_ports[0]) == (2, 1, 5000)


def test_ports_are_unique_and_skip_held_ones() -> None:
    room = _room("a", 8, ports=4, holdings=[Holding(_res(1), 5001)])
    slots = place_gang([Demand(1, i, _res(1)) for i in range(3)], [room])
    assert slots is not None
    assert sorted(slot.port for slot in slots.values()) == [5000, 5002, 5003]
    assert room.free_ports == []
    assert place_gang([Demand(2, 0, _res(0.1))], [room]) is None  # no port left


def test_holdings_use_capacity() -> None:
    room = _room("a", 4, holdings=[Holding(_res(3), 5000)])
    assert place_gang([Demand(0, 0, _res(2))], [room]) is None
    assert place_gang([Demand(0, 0, _res(1))], [room]) is not None


def test_accelerators_are_counted_by_type() -> None:
    rooms = [_room("cpu", 64), _room("gpu", 8, gpu="NVIDIA_L4", gpus=2)]
    need = _res(1, gpu="NVIDIA_L4", gpus=1)
    slots = place_gang([Demand(0, 0, need), Demand(1, 0, need)], rooms)
    assert slots is not None
    assert {slot.executor_id for slot in slots.values()} == {"gpu"}
    assert place_gang([Demand(1, 1, need)], rooms) is None
    assert place_gang([Demand(1, 1, _res(1, gpu="NVIDIA_TESLA_T4", gpus=1))], rooms) is None


def test_place_one_prefers_an_executor() -> None:
    rooms = [_room("a", 4), _room("b", 4)]
    slot = place_one(Demand(1, 0, _res(1)), rooms, prefer="b")
    assert slot is not None and slot.executor_id == "b"


def test_first_unfittable_names_the_pool() -> None:
    rooms = [_room("a", 4, gib=8)]
    demands = [Demand(0, 0, _res(1)), Demand(1, 0, _res(1, gib=32))]
    bad = first_unfittable(demands, rooms)
    assert bad is not None and bad.pool == 1
    assert first_unfittable(demands[:1], rooms) is None
