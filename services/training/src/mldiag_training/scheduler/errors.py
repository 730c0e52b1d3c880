"""The scheduler's errors: a machine type nobody knows, a job no executor could ever fit."""

from mldiag_platform.errors import FailedPrecondition, InvalidArgument


class UnknownMachineType(InvalidArgument):
    """A ``machineSpec`` names a machine type (or an accelerator) the table cannot give."""

    code = "unknown_machine_type"


class Unfittable(FailedPrecondition):
    """No executor seen lately could ever run a pool's replica (or the whole gang)."""

    code = "unfittable"
