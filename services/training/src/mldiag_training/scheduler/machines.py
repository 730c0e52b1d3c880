"""The machine table: what a ``machineSpec`` asks for, in CPUs, memory and accelerators.

Default entries (memory in GiB, as Google Cloud counts "GB"):

============================  =====  ==========  ==============================
type                          vCPUs  memory      accelerators
============================  =====  ==========  ==============================
n1-standard-{4,8,16,32,64,96}   n    3.75 x n    attach any (spec decides)
n1-highmem-{2..96}              n    6.5 x n     attach any
n1-highcpu-{2..96}              n    0.9 x n     attach any
n2-standard-{2..80}             n    4 x n
n2-highmem-{2..80}              n    8 x n
n2-highcpu-{2..80}              n    1 x n
e2-standard-{2..32}             n    4 x n
e2-highmem-{2..16}              n    8 x n
e2-highcpu-{2..32}              n    1 x n
c2-standard-{4,8,16,30,60}      n    4 x n
a2-highgpu-{1,2,4,8}g          12k   85 x k      k NVIDIA_TESLA_A100
a2-megagpu-16g                  96   1360        16 NVIDIA_TESLA_A100
a2-ultragpu-{1,2,4,8}g         12k   170 x k     k NVIDIA_A100_80GB
g2-standard-{4..96}             n    4 x n       1, 2, 4 or 8 NVIDIA_L4
a3-highgpu-{1,2,4,8}g          26k   234 x k     k NVIDIA_H100_80GB
a3-megagpu-8g                   208  1872        8 NVIDIA_H100_MEGA_80GB
a3-ultragpu-8g                  224  2952        8 NVIDIA_H200_141GB
local-small                     0.5  0.5         (for a workstation)
local-medium                    1    2
local-large                     4    16
============================  =====  ==========  ==============================

An empty ``machineType`` is ``n1-standard-4``, the Vertex SDK's default. Types that come with
GPUs (a2, a3, g2) give them when the spec names no accelerator, and refuse a different one;
other types get what the spec's ``acceleratorType``/``acceleratorCount`` say. The
``machine_types`` setting (``MLDIAG_TRAINING_MACHINE_TYPES``, JSON) adds or overrides
entries: ``{"my-type": {"cpus": 2, "memoryGb": 8, "acceleratorType": "NVIDIA_L4",
"acceleratorCount": 1}}``.
"""

from collections.abc import Mapping
from typing import Protocol

from pydantic import Field, TypeAdapter

from mldiag_schemas.base import Contract
from mldiag_schemas.jobs import AcceleratorType
from mldiag_schemas.replicas import Resources
from mldiag_training.scheduler.errors import UnknownMachineType

DEFAULT_MACHINE_TYPE = "n1-standard-4"
"""What an empty ``machineType`` means (the Vertex SDK's default)."""

GIB = 1024**3


class MachineType(Contract):
    """One entry of the table (also the shape of the setting's entries)."""

    cpus: float = Field(gt=0, description="vCPUs.")
    memory_gb: float = Field(gt=0, description="Memory in GiB.")
    accelerator_type: AcceleratorType = Field(
        default=AcceleratorType.UNSPECIFIED, description="GPUs that come with the type."
    )
    accelerator_count: int = Field(default=0, ge=0, description="How many.")


_SETTING = TypeAdapter(dict[str, MachineType])


def _family(prefix: str, sizes: tuple[int, ...], gib_per_cpu: float) -> dict[str, MachineType]:
    return {f"{prefix}-{n}": MachineType(cpus=n, memory_gb=n * gib_per_cpu) for n in sizes}


def _gpus(
    prefix: str,
    counts: tuple[int, ...],
    cpus_per_gpu: int,
    gib_per_gpu: float,
    accelerator: AcceleratorType,
) -> dict[str, MachineType]:
    return {
        f"{prefix}-{k}g": MachineType(
            cpus=k * cpus_per_gpu,
            memory_gb=k * gib_per_gpu,
            accelerator_type=accelerator,
            accelerator_count=k,
        )
        for k in counts
    }


def default_machine_types() -> dict[str, MachineType]:
    """The built-in table (see the module's docstring)."""
    n1 = (2, 4, 8, 16, 32, 64, 96)
    n2 = (2, 4, 8, 16, 32, 48, 64, 80)
    e2 = (2, 4, 8, 16, 32)
    table: dict[str, MachineType] = {
        **_family("n1-standard", (1, *n1), 3.75),
        **_family("n1-highmem", n1, 6.5),
        **_family("n1-highcpu", n1, 0.9),
        **_family("n2-standard", n2, 4),
        **_family("n2-highmem", n2, 8),
        **_family("n2-highcpu", n2, 1),
        **_family("e2-standard", e2, 4),
        **_family("e2-highmem", (2, 4, 8, 16), 8),
        **_family("e2-highcpu", e2, 1),
        **_family("c2-standard", (4, 8, 16, 30, 60), 4),
        **_gpus("a2-highgpu", (1, 2, 4, 8), 12, 85, AcceleratorType.NVIDIA_TESLA_A100),
        **_gpus("a2-megagpu", (16,), 6, 85, AcceleratorType.NVIDIA_TESLA_A100),
        **_gpus("a2-ultragpu", (1, 2, 4, 8), 12, 170, AcceleratorType.NVIDIA_A100_80GB),
        **_gpus("a3-highgpu", (1, 2, 4, 8), 26, 234, AcceleratorType.NVIDIA_H100_80GB),
        **_gpus("a3-megagpu", (8,), 26, 234, AcceleratorType.NVIDIA_H100_MEGA_80GB),
        **_gpus("a3-ultragpu", (8,), 28, 369, AcceleratorType.NVIDIA_H200_141GB),
        "local-small": MachineType(cpus=0.5, memory_gb=0.5),
        "local-medium": MachineType(cpus=1, memory_gb=2),
        "local-large": MachineType(cpus=4, memory_gb=16),
    }
    l4 = AcceleratorType.NVIDIA_L4
    for cpus, gpus in ((4, 1), (8, 1), (12, 1), (16, 1), (24, 2), (32, 1), (48, 4), (96, 8)):
        table[f"g2-standard-{cpus}"] = MachineType(
            cpus=cpus, memory_gb=cpus * 4, accelerator_type=l4, accelerator_count=gpus
        )
    return table


class _MachineSettings(Protocol):
    @property
    def machine_types(self) -> str: ...


class MachineTable:
    """Machine types by name; resolves a pool's ``machineSpec`` to :class:`Resources`."""

    def __init__(self, types: Mapping[str, MachineType] | None = None) -> None:
        self._types = dict(default_machine_types() if types is None else types)

    @classmethod
    def from_settings(cls, settings: _MachineSettings) -> "MachineTable":
        """The default table with the ``machine_types`` setting (JSON) laid over it.

        Raises ``ValueError`` for a setting that is not such a JSON object (a start-up
        error: the service must not run with a table it misread).
        """
        extra = _SETTING.validate_json(settings.machine_types or "{}")
        return cls({**default_machine_types(), **extra})

    def names(self) -> list[str]:
        """Every known machine type."""
        return sorted(self._types)

    def resolve(
        self,
        machine_type: str,
        accelerator_type: AcceleratorType,
        accelerator_count: int,
        field: str = "machineSpec.machineType",
    ) -> Resources:
        """What one replica of this machine spec needs.

        ``field`` is the ``machineType``'s path in the request, named by the error.
        Raises :class:`UnknownMachineType` (INVALID_ARGUMENT) for an unknown type, an
        accelerator count without a type, or a GPU type asked for another accelerator.
        """
        name = machine_type or DEFAULT_MACHINE_TYPE
        entry = self._types.get(name)
        accelerator_field = field.rsplit(".", 1)[0] + ".acceleratorType"
        if entry is None:
            raise UnknownMachineType(
                f"{field}: unknown machine type {name!r}; known types include "
                f"{', '.join(self.names()[:12])}, … (add your own with "
                "MLDIAG_TRAINING_MACHINE_TYPES)",
                details=[{"field": field, "problem": "unknown machine type"}],
            )
        asked = accelerator_type != AcceleratorType.UNSPECIFIED
        if accelerator_count > 0 and not asked:
            raise UnknownMachineType(
                f"{accelerator_field}: acceleratorCount is {accelerator_count} but no "
                "acceleratorType is named",
                details=[{"field": accelerator_field, "problem": "missing"}],
            )
        built_in = entry.accelerator_type != AcceleratorType.UNSPECIFIED
        if built_in and asked and accelerator_type != entry.accelerator_type:
            raise UnknownMachineType(
                f"{accelerator_field}: {name} comes with {entry.accelerator_type.value}, "
                f"not {accelerator_type.value}",
                details=[{"field": accelerator_field, "problem": "not this machine's"}],
            )
        if asked:
            # A type without a count: the machine's own count, or one.
            fallback = entry.accelerator_count if built_in else 1
            kind, count = accelerator_type, accelerator_count or fallback
        else:
            kind, count = entry.accelerator_type, entry.accelerator_count
        return Resources(
            cpus=entry.cpus,
            memory_bytes=int(entry.memory_gb * GIB),
            accelerator_type="" if kind == AcceleratorType.UNSPECIFIED else kind.value,
            accelerator_count=count if kind != AcceleratorType.UNSPECIFIED else 0,
        )
