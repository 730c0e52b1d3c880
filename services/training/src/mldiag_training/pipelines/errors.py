"""Errors of the training-pipelines API. Each keeps the platform base that gives its status."""

from mldiag_platform.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unimplemented,
)


class InvalidTrainingPipeline(InvalidArgument):
    """A TrainingPipeline body breaks a rule (details name the field, under
    ``trainingTaskInputs.`` for the task)."""

    code = "invalid_argument"


class UnsupportedPipelineField(Unimplemented):
    """A Vertex field mldiag knows but does not provide (``inputDataConfig``, ...)."""

    code = "unimplemented"


class TrainingPipelineNotFound(NotFound):
    """No training pipeline has that name."""

    code = "not_found"


class PipelineNotCancellable(FailedPrecondition):
    """The pipeline has ended: there is nothing to cancel."""

    code = "pipeline_ended"


class PipelineNotTerminal(FailedPrecondition):
    """Only a pipeline that has ended may be deleted."""

    code = "pipeline_not_ended"


class TargetModelExists(AlreadyExists):
    """``modelId`` names a model that exists already (name it in ``parentModel`` instead)."""

    code = "already_exists"
