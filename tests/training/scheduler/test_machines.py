"""The machine table: Vertex's types with their real sizes, local ones, the setting."""

from dataclasses import dataclass

import pytest

from mldiag_schemas.jobs import AcceleratorType
from mldiag_training.scheduler.errors import UnknownMachineType
from mldiag_training.scheduler.machines import GIB, MachineTable

NONE = AcceleratorType.UNSPECIFIED


@dataclass(frozen=True)
class _Settings:
    machine_types: str


def test_vertex_types_have_their_real_sizes() -> None:
    table = MachineTable()
    n1 = table.resolve("n1-standard-8", NONE, 0)
    assert (n1.cpus, n1.memory_bytes, n1.accelerator_count) == (8, 30 * GIB, 0)
    a2 = table.resolve("a2-highgpu-2g", NONE, 0)
    assert (a2.cpus, a2.memory_bytes) == (24, 170 * GIB)
    assert (a2.accelerator_type, a2.accelerator_count) == ("NVIDIA_TESLA_A100", 2)
    a3 = table.resolve("a3-highgpu-8g", NONE, 0)
    assert (a3.cpus, a3.accelerator_type, a3.accelerator_count) == (208, "NVIDIA_H100_80GB", 8)
    g2 = table.resolve("g2-standard-48", NONE, 0)
    assert (g2.cpus, g2.memory_bytes, g2.accelerator_type, g2.accelerator_count) == (
        48,
        192 * GIB,
        "NVIDIA_L4",
        4,
    )
    e2 = table.resolve("e2-highmem-4", NONE, 0)
    assert (e2.cpus, e2.memory_bytes) == (4, 32 * GIB)
    local = table.resolve("local-small", NONE, 0)
    assert (local.cpus, local.memory_bytes) == (0.5, 512 * 1024**2)


def test_empty_type_is_the_sdk_default() -> None:
    assert MachineTable().resolve("", NONE, 0) == MachineTable().resolve("n1-standard-4", NONE, 0)


def test_attached_accelerators_come_from_the_spec() -> None:
    t4 = MachineTable().resolve("n1-standard-8", AcceleratorType.NVIDIA_TESLA_T4, 2)
    assert (t4.cpus, t4.accelerator_type, t4.accelerator_count) == (8, "NVIDIA_TESLA_T4", 2)


def test_unknown_type_names_the_field() -> None:
    field = "jobSpec.workerPoolSpecs[1].machineSpec.machineType"
    with pytest.raises(UnknownMachineType) as caught:
        MachineTable().resolve("n9-huge", NONE, 0, field=field)
    assert caught.value.message.startswith(field)
    assert caught.value.details == [{"field": field, "problem": "unknown machine type"}]
    assert caught.value.http_status == 400


def test_a_gpu_type_refuses_another_accelerator() -> None:
    with pytest.raises(UnknownMachineType, match=r"machineSpec\.acceleratorType"):
        MachineTable().resolve("a2-highgpu-1g", AcceleratorType.NVIDIA_L4, 1)


def test_a_count_needs_a_type() -> None:
    with pytest.raises(UnknownMachineType, match="acceleratorType"):
        MachineTable().resolve("n1-standard-4", NONE, 2)


def test_the_setting_adds_and_overrides() -> None:
    table = MachineTable.from_settings(
        _Settings(
            '{"my-type": {"cpus": 2, "memoryGb": 8, "acceleratorType": "NVIDIA_L4",'
            ' "acceleratorCount": 1}, "n1-standard-4": {"cpus": 1, "memoryGb": 1}}'
        )
    )
    mine = table.resolve("my-type", NONE, 0)
    assert (mine.cpus, mine.memory_bytes, mine.accelerator_type, mine.accelerator_count) == (
        2,
        8 * GIB,
        "NVIDIA_L4",
        1,
    )
    assert table.resolve("", NONE, 0).cpus == 1
    assert table.resolve("n1-highmem-2", NONE, 0).cpus == 2  # the defaults stay


def test_a_bad_setting_fails_at_start() -> None:
    with pytest.raises(ValueError, match="cpus"):
        MachineTable.from_settings(_Settings('{"x": {"memoryGb": 1}}'))
