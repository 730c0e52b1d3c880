"""Errors of the model registry. Each keeps the platform base that gives its status."""

from mldiag_platform.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound


class InvalidModel(InvalidArgument):
    """An upload, update or alias request breaks a rule (details name the field)."""

    code = "invalid_argument"


class NoModelArtifacts(InvalidModel):
    """``artifactUri`` is missing, unreadable, or names a folder without files (a training
    pipeline maps this to its failure)."""

    code = "no_model_artifacts"


class ModelNotFound(NotFound):
    """No model (or no such version or alias of it) has that name."""

    code = "not_found"


class ModelAlreadyExists(AlreadyExists):
    """``modelId`` names a model that exists already."""

    code = "already_exists"


class DefaultVersionInUse(FailedPrecondition):
    """The default version cannot be deleted (nor lose ``default``) while others exist."""

    code = "default_version"
