"""Hyperparameter tuning: the Vertex AI v1 ``HyperparameterTuningJob`` resource (its
``StudySpec``, trials and measurements) and the bus facts of tuning.

Encodings follow :mod:`mldiag_schemas.jobs` (proto3 JSON, camelCase, int64 as strings, enums
as names or numbers). Every trial is a custom job (and so a monitored run) created from
``trialJobSpec`` with the trial's hyperparameters appended as ``--<parameterId>=<value>``.

Vertex fields mldiag knows but does not provide (Vizier's decay-curve and convex stopping,
observation noise, safety configs) are listed in :data:`UNSUPPORTED_STUDY_SPEC_FIELDS` so the
service refuses them by name.
"""

import enum
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, model_validator

from mldiag_schemas.base import Contract
from mldiag_schemas.envelope import Envelope
from mldiag_schemas.ids import LocationId, ProjectId, RunId
from mldiag_schemas.jobs import (
    ENUM_NUMBERS,
    AcceleratorType,
    CustomJobSpec,
    Duration,
    Int64,
    JobState,
    LabelKey,
    LabelValue,
    RpcStatus,
    Strategy,
    enum_from_number,
)

MAX_PARAMETERS = 100
"""The most parameters (conditional ones included) a study may search."""
MAX_DISCRETE_VALUES = 1_000
"""Vertex's limit on ``discreteValueSpec.values``."""
MAX_TRIALS = 10_000
"""The most trials one tuning job may ask for."""


class GoalType(enum.StrEnum):
    """Vertex's ``StudySpec.MetricSpec.GoalType`` (UNSPECIFIED means MAXIMIZE)."""

    UNSPECIFIED = "GOAL_TYPE_UNSPECIFIED"
    MAXIMIZE = "MAXIMIZE"
    MINIMIZE = "MINIMIZE"


class ScaleType(enum.StrEnum):
    """Vertex's ``StudySpec.ParameterSpec.ScaleType``."""

    UNSPECIFIED = "SCALE_TYPE_UNSPECIFIED"
    UNIT_LINEAR_SCALE = "UNIT_LINEAR_SCALE"
    UNIT_LOG_SCALE = "UNIT_LOG_SCALE"
    UNIT_REVERSE_LOG_SCALE = "UNIT_REVERSE_LOG_SCALE"


class Algorithm(enum.StrEnum):
    """Vertex's ``StudySpec.Algorithm``; UNSPECIFIED is the Bayesian-style default."""

    UNSPECIFIED = "ALGORITHM_UNSPECIFIED"
    GRID_SEARCH = "GRID_SEARCH"
    RANDOM_SEARCH = "RANDOM_SEARCH"


class MeasurementSelectionType(enum.StrEnum):
    """Which measurement becomes a trial's final one (UNSPECIFIED means LAST)."""

    UNSPECIFIED = "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"
    LAST_MEASUREMENT = "LAST_MEASUREMENT"
    BEST_MEASUREMENT = "BEST_MEASUREMENT"


class TrialState(enum.StrEnum):
    """Vertex's ``Trial.State``."""

    UNSPECIFIED = "STATE_UNSPECIFIED"
    REQUESTED = "REQUESTED"
    ACTIVE = "ACTIVE"
    """Suggested, and its custom job created."""
    STOPPING = "STOPPING"
    """Median stopping (or the study ending) asked its custom job to stop."""
    SUCCEEDED = "SUCCEEDED"
    """Ended with a final measurement (also when stopped early)."""
    INFEASIBLE = "INFEASIBLE"
    """Ended without a final measurement: it failed or reported no objective metric."""


TERMINAL_TRIAL_STATES = frozenset({TrialState.SUCCEEDED, TrialState.INFEASIBLE})
"""States a trial never leaves."""

TUNING_ENUM_NUMBERS: dict[type[enum.StrEnum], dict[str, int]] = {
    GoalType: {"GOAL_TYPE_UNSPECIFIED": 0, "MAXIMIZE": 1, "MINIMIZE": 2},
    ScaleType: {
        "SCALE_TYPE_UNSPECIFIED": 0,
        "UNIT_LINEAR_SCALE": 1,
        "UNIT_LOG_SCALE": 2,
        "UNIT_REVERSE_LOG_SCALE": 3,
    },
    Algorithm: {"ALGORITHM_UNSPECIFIED": 0, "GRID_SEARCH": 2, "RANDOM_SEARCH": 3},
    MeasurementSelectionType: {
        "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED": 0,
        "LAST_MEASUREMENT": 1,
        "BEST_MEASUREMENT": 2,
    },
    TrialState: {
        "STATE_UNSPECIFIED": 0,
        "REQUESTED": 1,
        "ACTIVE": 2,
        "STOPPING": 3,
        "SUCCEEDED": 4,
        "INFEASIBLE": 5,
    },
}
"""Each tuning enum's proto numbers, by name."""

TUNING_ENUM_FIELDS: dict[str, dict[str, int]] = {
    "goal": TUNING_ENUM_NUMBERS[GoalType],
    "scaleType": TUNING_ENUM_NUMBERS[ScaleType],
    "algorithm": TUNING_ENUM_NUMBERS[Algorithm],
    "measurementSelectionType": TUNING_ENUM_NUMBERS[MeasurementSelectionType],
    # A job's state and its trials' states share the key; their names never collide.
    "state": {**ENUM_NUMBERS[JobState], **TUNING_ENUM_NUMBERS[TrialState]},
    "acceleratorType": ENUM_NUMBERS[AcceleratorType],
    "strategy": ENUM_NUMBERS[Strategy],
}
"""The camelCase keys of a HyperparameterTuningJob document holding an enum, each with the
numbers of its names (``enum-encoding=int``)."""


def _enum(kind: type[enum.StrEnum]) -> object:
    return enum_from_number(kind, TUNING_ENUM_NUMBERS.get(kind))


class DoubleValueSpec(Contract):
    """A continuous parameter in ``[minValue, maxValue]``."""

    min_value: float = Field(description="The smallest value (inclusive).")
    max_value: float = Field(description="The largest value (inclusive).")
    default_value: float | None = Field(default=None, description="Vizier-only: refused.")


class IntegerValueSpec(Contract):
    """An integer parameter in ``[minValue, maxValue]`` (int64: strings on the wire)."""

    min_value: Int64 = Field(description="The smallest value (inclusive).")
    max_value: Int64 = Field(description="The largest value (inclusive).")
    default_value: Int64 | None = Field(default=None, description="Vizier-only: refused.")


class CategoricalValueSpec(Contract):
    """A parameter taking one of a list of strings."""

    values: list[Annotated[str, Field(max_length=1000)]] = Field(
        min_length=1, max_length=MAX_DISCRETE_VALUES, description="The choices."
    )
    default_value: str | None = Field(default=None, description="Vizier-only: refused.")


class DiscreteValueSpec(Contract):
    """A parameter taking one of a list of numbers (increasing)."""

    values: list[float] = Field(
        min_length=1, max_length=MAX_DISCRETE_VALUES, description="The choices, increasing."
    )
    default_value: float | None = Field(default=None, description="Vizier-only: refused.")


class DiscreteValueCondition(Contract):
    """The parent (a DISCRETE parameter) values under which a child is searched."""

    values: list[float] = Field(min_length=1, description="Parent values.")


class IntValueCondition(Contract):
    """The parent (an INTEGER parameter) values under which a child is searched."""

    values: list[Int64] = Field(min_length=1, description="Parent values.")


class CategoricalValueCondition(Contract):
    """The parent (a CATEGORICAL parameter) values under which a child is searched."""

    values: list[str] = Field(min_length=1, description="Parent values.")


class ParameterSpec(Contract):
    """One hyperparameter: its id (the trial's ``--<id>=`` argument), its domain, its scale
    and the parameters that depend on it."""

    parameter_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
        description="The name the trial receives it under (``--<parameterId>=<value>``).",
    )
    double_value_spec: DoubleValueSpec | None = Field(default=None, description="DOUBLE.")
    integer_value_spec: IntegerValueSpec | None = Field(default=None, description="INTEGER.")
    categorical_value_spec: CategoricalValueSpec | None = Field(
        default=None, description="CATEGORICAL."
    )
    discrete_value_spec: DiscreteValueSpec | None = Field(default=None, description="DISCRETE.")
    scale_type: Annotated[ScaleType, _enum(ScaleType)] = Field(
        default=ScaleType.UNSPECIFIED, description="How values are spread (not for CATEGORICAL)."
    )
    conditional_parameter_specs: list["ConditionalParameterSpec"] = Field(
        default_factory=list, description="Children searched under some of its values."
    )

    @model_validator(mode="after")
    def _one_domain(self) -> "ParameterSpec":
        given = [
            d
            for d in (
                self.double_value_spec,
                self.integer_value_spec,
                self.categorical_value_spec,
                self.discrete_value_spec,
            )
            if d is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "set exactly one of doubleValueSpec, integerValueSpec, categoricalValueSpec, "
                "discreteValueSpec"
            )
        return self


class ConditionalParameterSpec(Contract):
    """A child parameter searched only when its parent takes one of some values."""

    parent_discrete_values: DiscreteValueCondition | None = Field(
        default=None, description="For a DISCRETE parent."
    )
    parent_int_values: IntValueCondition | None = Field(
        default=None, description="For an INTEGER parent."
    )
    parent_categorical_values: CategoricalValueCondition | None = Field(
        default=None, description="For a CATEGORICAL parent."
    )
    parameter_spec: ParameterSpec = Field(description="The child parameter.")

    @model_validator(mode="after")
    def _one_condition(self) -> "ConditionalParameterSpec":
        given = [
            c
            for c in (
                self.parent_discrete_values,
                self.parent_int_values,
                self.parent_categorical_values,
            )
            if c is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "set exactly one of parentDiscreteValues, parentIntValues, parentCategoricalValues"
            )
        return self


class MetricSpec(Contract):
    """A metric the study optimises (several make the study multi-objective)."""

    metric_id: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^\S+$",
        description="The metric's name, as trials report it (no whitespace).",
    )
    goal: Annotated[GoalType, _enum(GoalType)] = Field(
        default=GoalType.UNSPECIFIED, description="MAXIMIZE or MINIMIZE (UNSPECIFIED: maximize)."
    )


class MedianAutomatedStoppingSpec(Contract):
    """Stop a trial whose best value so far is worse than the median of completed trials
    at the same step (or elapsed time)."""

    use_elapsed_duration: bool = Field(
        default=False, description="Compare at equal elapsed seconds instead of steps."
    )


class StudyTimeConstraint(Contract):
    """A time limit: a duration or an end time."""

    max_duration: Duration | None = Field(default=None, description="How long at most.")
    end_time: datetime | None = Field(default=None, description="When at the latest.")


class StudyStoppingConfig(Contract):
    """When the study stops asking for trials before ``maxTrialCount``."""

    should_stop_asap: bool | None = Field(
        default=None, description="Stop active trials at once when a rule fires."
    )
    minimum_runtime_constraint: StudyTimeConstraint | None = Field(
        default=None, description="No rule fires before this."
    )
    maximum_runtime_constraint: StudyTimeConstraint | None = Field(
        default=None, description="Stop after this."
    )
    min_num_trials: int | None = Field(default=None, ge=0, description="No rule fires before.")
    max_num_trials: int | None = Field(default=None, ge=1, description="Stop after this many.")
    max_num_trials_no_progress: int | None = Field(
        default=None, ge=1, description="Stop after this many trials without a better value."
    )
    max_duration_no_progress: Duration | None = Field(
        default=None, description="Stop after this long without a better value."
    )


class StudySpec(Contract):
    """What to search and how."""

    metrics: list[MetricSpec] = Field(min_length=1, max_length=16, description="The goals.")
    parameters: list[ParameterSpec] = Field(
        min_length=1, max_length=MAX_PARAMETERS, description="The search space."
    )
    algorithm: Annotated[Algorithm, _enum(Algorithm)] = Field(
        default=Algorithm.UNSPECIFIED, description="UNSPECIFIED (Bayesian-style), GRID, RANDOM."
    )
    measurement_selection_type: Annotated[
        MeasurementSelectionType, _enum(MeasurementSelectionType)
    ] = Field(
        default=MeasurementSelectionType.UNSPECIFIED,
        description="Which measurement is final (UNSPECIFIED: the last).",
    )
    median_automated_stopping_spec: MedianAutomatedStoppingSpec | None = Field(
        default=None, description="Stop unpromising trials early."
    )
    study_stopping_config: StudyStoppingConfig | None = Field(
        default=None, description="Stop the study early."
    )


UNSUPPORTED_STUDY_SPEC_FIELDS: dict[str, str] = {
    "decayCurveStoppingSpec": "decay-curve automated stopping (use medianAutomatedStoppingSpec)",
    "convexAutomatedStoppingSpec": "convex automated stopping (use medianAutomatedStoppingSpec)",
    "observationNoise": "observation noise (a Vizier-only setting)",
    "convexStopConfig": "convex stopping (v1beta1)",
    "transferLearningConfig": "transfer learning between studies (v1beta1)",
}
"""studySpec fields mldiag refuses by name (UNIMPLEMENTED)."""

UNSUPPORTED_TUNING_JOB_FIELDS: dict[str, str] = {
    "encryptionSpec": "customer-managed encryption keys",
    "satisfiesPzs": "an output-only Vertex field",
    "satisfiesPzi": "an output-only Vertex field",
}
"""HyperparameterTuningJob fields mldiag refuses by name (UNIMPLEMENTED)."""


class MeasurementMetric(Contract):
    """One metric's value in a measurement."""

    metric_id: str = Field(description="The metric.")
    value: float = Field(description="Its value.")


class Measurement(Contract):
    """What a trial reported at one step."""

    elapsed_duration: Duration | None = Field(
        default=None, description="Time since the trial started."
    )
    step_count: Int64 = Field(default=0, ge=0, description="The step (int64).")
    metrics: list[MeasurementMetric] = Field(default_factory=list, description="The values.")


class TrialParameter(Contract):
    """A trial's value of one parameter (a number, or a string for CATEGORICAL)."""

    parameter_id: str = Field(description="The parameter.")
    value: float | str = Field(description="Its value in this trial.")


class Trial(Contract):
    """One suggestion of the study, run as a custom job."""

    name: str = Field(
        default="",
        description="``projects/{p}/locations/{l}/hyperparameterTuningJobs/{id}/trials/{t}``.",
    )
    id: str = Field(description="The trial's id: 1, 2, ... in the order suggested.")
    state: Annotated[TrialState, _enum(TrialState)] = Field(
        default=TrialState.UNSPECIFIED, description="Where the trial is."
    )
    parameters: list[TrialParameter] = Field(default_factory=list, description="Its values.")
    final_measurement: Measurement | None = Field(
        default=None, description="The measurement chosen by measurementSelectionType."
    )
    measurements: list[Measurement] = Field(
        default_factory=list, description="Intermediate measurements, by step."
    )
    start_time: datetime | None = Field(default=None, description="When it was suggested.")
    end_time: datetime | None = Field(default=None, description="When it ended.")
    client_id: str = Field(default="", description="Unused (Vizier clients).")
    infeasible_reason: str = Field(default="", description="Why it ended INFEASIBLE.")
    custom_job: str = Field(default="", description="The resource name of its custom job.")
    web_access_uris: dict[str, str] = Field(default_factory=dict, description="Always empty.")
    stopped_early: bool = Field(
        default=False,
        description="mldiag extension: median stopping ended it (the old AI Platform's "
        "``isTrialStoppedEarly``); the SDK's REST transport ignores unknown fields.",
    )


class HyperparameterTuningJob(Contract):
    """A hyperparameter tuning job (a study): ``trialJobSpec`` run with the parameters the
    search suggests, ``parallelTrialCount`` at a time, until ``maxTrialCount`` trials have
    run (or the grid is exhausted, or a stopping rule fires). Its id is also its ML run's."""

    name: str = Field(
        default="",
        description="Output: ``projects/{p}/locations/{l}/hyperparameterTuningJobs/{id}``.",
    )
    display_name: str = Field(min_length=1, max_length=128, description="A name for people.")
    study_spec: StudySpec = Field(description="What to search and how.")
    max_trial_count: int = Field(ge=1, le=MAX_TRIALS, description="How many trials at most.")
    parallel_trial_count: int = Field(ge=1, le=MAX_TRIALS, description="How many at once.")
    max_failed_trial_count: int = Field(
        default=0, ge=0, le=MAX_TRIALS, description="Fail the job after this many (0: decided)."
    )
    trial_job_spec: CustomJobSpec = Field(description="What every trial runs.")
    trials: list[Trial] = Field(default_factory=list, description="Output: every trial so far.")
    state: Annotated[JobState, _enum(JobState)] = Field(
        default=JobState.UNSPECIFIED, description="Output: where the job is."
    )
    create_time: datetime | None = Field(default=None, description="Output: created.")
    start_time: datetime | None = Field(default=None, description="Output: first RUNNING.")
    end_time: datetime | None = Field(default=None, description="Output: reached its end.")
    update_time: datetime | None = Field(default=None, description="Output: last change.")
    error: RpcStatus | None = Field(default=None, description="Output: when FAILED/CANCELLED.")
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=64, description="Labels (Vertex's rules)."
    )


class ListHyperparameterTuningJobsResponse(Contract):
    """A page of ``GET .../hyperparameterTuningJobs``."""

    hyperparameter_tuning_jobs: list[HyperparameterTuningJob] = Field(
        default_factory=list, description="The page."
    )
    next_page_token: str = Field(default="", description="Pass as pageToken for the next page.")


# --- Bus facts ---------------------------------------------------------------------------


class TrialOfJob(Contract):
    """On a trial's ``CustomJobCreated``: the study it belongs to and its parameters, so its
    run joins the study's run set with the parameters as configs."""

    tuning_job_id: RunId = Field(description="The tuning job (the study's run).")
    study_display_name: str = Field(description="The tuning job's display name.")
    trial_id: str = Field(description="The trial's id in its study.")
    parameters: dict[str, float | str] = Field(description="The trial's hyperparameters.")


class TuningJobCreated(Envelope):
    """A tuning job was created; its run (the study's) is to be created with the same id.
    Subject: ``training.tuning.created.<job>``."""

    type: Literal["training.tuning.created"] = "training.tuning.created"
    job_id: RunId = Field(description="The tuning job's id, which its run takes.")
    project: ProjectId = Field(description="The job's project.")
    location: LocationId = Field(description="The job's location.")
    job: HyperparameterTuningJob = Field(description="The job as created (no trials yet).")
    run_set: str = Field(description="The run set of the study's run and its trials' runs.")

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.job_id


class TuningJobStateChanged(Envelope):
    """A tuning job moved between states, or its best trial changed. Subject:
    ``training.tuning.state_changed.<job>``."""

    type: Literal["training.tuning.state_changed"] = "training.tuning.state_changed"
    job_id: RunId = Field(description="The tuning job (and its run).")
    project: ProjectId = Field(description="The job's project.")
    location: LocationId = Field(description="The job's location.")
    previous_state: JobState = Field(description="The state before.")
    state: JobState = Field(description="The state now.")
    error: RpcStatus | None = Field(default=None, description="Why it failed or was cancelled.")
    best_trial: Trial | None = Field(
        default=None, description="The best trial so far (single-objective studies)."
    )
    trials_succeeded: int = Field(default=0, ge=0, description="Trials SUCCEEDED so far.")
    trials_infeasible: int = Field(default=0, ge=0, description="Trials INFEASIBLE so far.")

    def partition(self) -> str:
        """The job: the last subject token."""
        return self.job_id


class TrialEnded(Envelope):
    """A trial ended (SUCCEEDED or INFEASIBLE). Subject: ``training.trial.ended.<trial's
    custom job>`` (the trial's run)."""

    type: Literal["training.trial.ended"] = "training.trial.ended"
    tuning_job_id: RunId = Field(description="The tuning job.")
    trial_job_id: RunId = Field(description="The trial's custom job (and its run).")
    trial: Trial = Field(description="The trial as it ended.")
    stopped_early: bool = Field(default=False, description="Median stopping ended it.")

    def partition(self) -> str:
        """The trial's custom job: the last subject token."""
        return self.trial_job_id


ParameterSpec.model_rebuild()  # its children are ConditionalParameterSpecs, defined after it
