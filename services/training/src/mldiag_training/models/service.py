"""The model registry's domain: uploading models and versions, reading and listing them,
moving aliases, updating and deleting.

Rules (Vertex's):

- a model's versions are ``1``, ``2``, ...; a new version's id is the highest ever given + 1;
- the first version is the default; a later one becomes it when its upload names
  ``default`` among its aliases (the SDK sends it unless ``is_default_version=False``);
- a user alias names at most one version of a model: giving it to one takes it from another;
- the default version cannot be deleted while other versions exist; deleting the last
  version deletes the model;
- nothing is registered unless ``artifactUri`` holds files.

A training pipeline imports its model through :meth:`ModelsService.import_version`, which
an idempotency key (the pipeline's name) makes safe to repeat.
"""

from dataclasses import replace
from datetime import UTC, datetime

import structlog

from mldiag_platform.errors import InvalidArgument
from mldiag_platform.listing.filtering import (
    FieldSpec,
    Kind,
    OrderKey,
    field_table,
)
from mldiag_schemas.models import (
    DEFAULT_ALIAS,
    ListModelsResponse,
    ListModelVersionsResponse,
    Model,
    ModelEmptyResponse,
    ModelLineage,
    ModelOperation,
    UploadModelRequest,
    UploadModelResponse,
)
from mldiag_training.errors import not_found
from mldiag_training.jobs.service import new_job_id
from mldiag_training.listing import Listing, named_value, page_query
from mldiag_training.models.artifacts import ArtifactFiles
from mldiag_training.models.errors import (
    DefaultVersionInUse,
    InvalidModel,
    ModelAlreadyExists,
    ModelNotFound,
    NoModelArtifacts,
)
from mldiag_training.models.repository import ModelsRepository, NewVersion, Outcome, model_name
from mldiag_training.models.validation import check_model, invalid

log = structlog.get_logger(__name__)

_MAX_ID_ATTEMPTS = 5

MODEL_FIELDS = field_table(
    (
        FieldSpec("display_name", Kind.STRING, aliases=("displayName",)),
        FieldSpec("labels", Kind.MAP, orderable=False),
        FieldSpec("create_time", Kind.TIMESTAMP, aliases=("createTime",)),
        FieldSpec("update_time", Kind.TIMESTAMP, aliases=("updateTime",)),
    )
)
"""What ``filter`` and ``orderBy`` of ``GET .../models`` may name (``labels``: the default
version's)."""
VERSION_FIELDS = field_table(
    (
        FieldSpec("labels", Kind.MAP, orderable=False),
        FieldSpec("create_time", Kind.TIMESTAMP, aliases=("createTime",)),
        FieldSpec("update_time", Kind.TIMESTAMP, aliases=("updateTime",)),
    )
)
"""What ``filter`` and ``orderBy`` of ``:listVersions`` may name (a version's times)."""

MODEL_LISTING = Listing(
    fields=MODEL_FIELDS,
    default_order=(OrderKey("create_time", descending=True),),
    id_field="model_id",
    timestamps=frozenset({"create_time", "update_time"}),
)
"""How lists of models are filtered, ordered (newest first by default) and paged."""
VERSION_LISTING = Listing(
    fields=VERSION_FIELDS,
    default_order=(),
    id_field="version_id",
    timestamps=frozenset({"create_time", "update_time"}),
)
"""How a model's versions are filtered, ordered (oldest first by default) and paged."""


def _version_value(version: Model, field: str) -> object:
    # A version is ordered by its own times, not the model's (``create_time`` of a Model).
    if field == "create_time":
        return version.version_create_time
    if field == "update_time":
        return version.version_update_time
    return version.version_id


def parse_model_ref(name: str) -> tuple[str, str | None]:
    """A path's ``{id}`` or ``{id}@{version or alias}`` as (id, ref); ref None for no
    ``@``. ``@-`` means the model itself, as in Vertex."""
    model_id, at, ref = name.partition("@")
    if not at or ref == "-":
        return model_id, None
    if not ref:
        raise invalid("name", "name a version or an alias after '@'")
    return model_id, ref


def _not_found(project: str, location: str, model_id: str, ref: str | None = None) -> ModelNotFound:
    name = model_name(project, location, model_id)
    if ref is not None:
        name = f"{name}@{ref}"
    return not_found(ModelNotFound, name)


def _parent_id(project: str, location: str, parent_model: str) -> str:
    """A parentModel (a model's name, with or without a version, or its id) as its id; its
    project and location must be the request's."""
    name = parent_model.partition("@")[0]
    prefix = f"projects/{project}/locations/{location}/models/"
    if "/" in name:
        if not name.startswith(prefix) or "/" in name[len(prefix) :]:
            raise invalid(
                "parentModel",
                f"{parent_model[:200]!r} is not a model of {project}/{location}: use"
                f" {prefix}ID or the id",
            )
        name = name[len(prefix) :]
    if not name:
        raise invalid("parentModel", "name the model the upload is a version of")
    return name


class ModelsService:
    """The model registry of one installation, in every project and location."""

    def __init__(self, repository: ModelsRepository, artifacts: ArtifactFiles) -> None:
        self._repository = repository
        self._artifacts = artifacts

    async def _check_files(self, artifact_uri: str, field: str) -> None:
        try:
            holds = await self._artifacts.holds_files(artifact_uri)
        except InvalidArgument as error:  # a URI storage refuses ('..'): name the field
            raise invalid(field, error.message) from None
        if not holds:
            problem = f"{artifact_uri[:200]!r} holds no files: there is no model to register"
            raise NoModelArtifacts(
                f"{field}: {problem}", details=[{"field": field, "problem": problem}]
            )

    async def upload(
        self, project: str, location: str, request: UploadModelRequest
    ) -> ModelOperation:
        """Register ``request.model`` (validated by :func:`validation.parse_upload`) as a new
        model or the next version of ``parentModel``; answers the done operation."""
        await self._check_files(request.model.artifact_uri, "model.artifactUri")
        stored = await self._store(
            project,
            location,
            request.model,
            parent_model=request.parent_model,
            model_id=request.model_id,
            lineage=None,
            idempotency_key="",
            with_operation=True,
        )
        operation = stored[1]
        assert operation is not None  # noqa: S101  # asked for above
        return operation

    async def import_version(
        self,
        project: str,
        location: str,
        model: Model,
        *,
        artifact_uri: str,
        parent_model: str = "",
        model_id: str = "",
        lineage: ModelLineage,
        idempotency_key: str = "",
    ) -> Model:
        """Register the files at ``artifact_uri`` as ``model`` (a training pipeline's
        ``modelToUpload``): a new model (``model_id``, or digits), or the next version of
        ``parent_model``; ``lineage`` records what produced it. A second call with the same
        ``idempotency_key`` answers the version the first stored.

        Raises :class:`NoModelArtifacts` when ``artifact_uri`` holds no files,
        :class:`InvalidModel` for a model that breaks a rule, :class:`ModelNotFound` for an
        unknown parent, :class:`ModelAlreadyExists` for a taken ``model_id``.
        """
        if idempotency_key:
            existing = await self._repository.by_idempotency_key(idempotency_key)
            if existing is not None:
                return existing
        model = model.model_copy(update={"artifact_uri": artifact_uri})
        check_model(model, "modelToUpload.")
        await self._check_files(artifact_uri, "modelToUpload.artifactUri")
        stored, _ = await self._store(
            project,
            location,
            model,
            parent_model=parent_model,
            model_id=model_id,
            lineage=lineage,
            idempotency_key=idempotency_key,
            with_operation=False,
        )
        return stored

    async def _store(
        self,
        project: str,
        location: str,
        model: Model,
        *,
        parent_model: str,
        model_id: str,
        lineage: ModelLineage | None,
        idempotency_key: str,
        with_operation: bool,
    ) -> tuple[Model, ModelOperation | None]:
        now = datetime.now(UTC)
        user_aliases = [alias for alias in model.version_aliases if alias != DEFAULT_ALIAS]
        new = NewVersion(
            model=model,
            aliases=user_aliases,
            make_default=DEFAULT_ALIAS in model.version_aliases,
            lineage_json=lineage.model_dump_json() if lineage else None,
            idempotency_key=idempotency_key,
            now=now,
        )

        made: list[ModelOperation] = []

        def operation_for(identifier: str, version_id: int) -> ModelOperation | None:
            if not with_operation:
                return None
            name = model_name(project, location, identifier)
            made.append(
                ModelOperation(
                    name=f"{name}/operations/{new_job_id()}",
                    response=UploadModelResponse(model=name, model_version_id=str(version_id)),
                )
            )
            return made[-1]

        if parent_model:
            identifier = _parent_id(project, location, parent_model)
            outcome, version_id = await self._repository.add_version(
                project,
                location,
                identifier,
                new,
                lambda version: operation_for(identifier, version),
            )
            if outcome is Outcome.NO_MODEL:
                raise _not_found(project, location, identifier)
        else:
            # The first version is the default whatever the upload says.
            new = replace(new, make_default=True)
            version_id = 1
            for _ in range(1 if model_id else _MAX_ID_ATTEMPTS):
                identifier = model_id or new_job_id()
                outcome = await self._repository.create_model(
                    project, location, identifier, new, operation_for(identifier, 1)
                )
                if outcome is not Outcome.MODEL_EXISTS:
                    break
                if model_id:
                    name = model_name(project, location, model_id)
                    raise ModelAlreadyExists(
                        f"{name} exists already: upload a version of it with parentModel",
                        details=[{"field": "modelId", "resource": name}],
                    )
            else:  # pragma: no cover - 1000 ids per microsecond would have to collide
                raise RuntimeError("no free model id after several attempts")
        if outcome is Outcome.DUPLICATE_KEY:
            # Another import with this key committed first: answer its version.
            existing = await self._repository.by_idempotency_key(idempotency_key)
            if existing is None:  # pragma: no cover - the key's row was deleted meanwhile
                raise InvalidModel("the model was imported and deleted meanwhile")
            return existing, None
        stored = await self._repository.get(project, location, identifier, str(version_id))
        if stored is None:  # pragma: no cover - deleted between commit and read
            raise _not_found(project, location, identifier, str(version_id))
        log.info(
            "models.version_registered",
            model=stored.name,
            version=stored.version_id,
            pipeline=lineage.training_pipeline if lineage else "",
        )
        return stored, made[-1] if made else None

    async def get(self, project: str, location: str, name: str) -> Model:
        """``{id}`` (the default version), ``{id}@{version}`` or ``{id}@{alias}``."""
        model_id, ref = parse_model_ref(name)
        model = await self._repository.get(project, location, model_id, ref)
        if model is None:
            raise _not_found(project, location, model_id, ref)
        return model

    async def operation(
        self, project: str, location: str, name: str, operation_id: str
    ) -> ModelOperation:
        """An upload's or delete's operation, answered again."""
        model_id, _ = parse_model_ref(name)
        operation = await self._repository.operation(project, location, model_id, operation_id)
        if operation is None:
            resource = f"{model_name(project, location, model_id)}/operations/{operation_id}"
            raise not_found(ModelNotFound, resource)
        return operation

    async def list_models(
        self,
        project: str,
        location: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str = "",
        order_by: str = "",
    ) -> ListModelsResponse:
        """A page of the parent's models (each its default version), newest first unless
        ``order_by``."""
        query = page_query(MODEL_LISTING, requested_size, page_token, filter_text, order_by)
        found = await self._repository.list_models(
            project, location, query.where, query.order, query.size + 1, query.after
        )
        models, token = query.page(found, named_value("model_id"))
        return ListModelsResponse(models=models, next_page_token=token)

    async def list_versions(
        self,
        project: str,
        location: str,
        name: str,
        requested_size: int | None,
        page_token: str,
        filter_text: str = "",
        order_by: str = "",
    ) -> ListModelVersionsResponse:
        """A page of a model's versions, oldest first unless ``order_by``."""
        model_id, _ = parse_model_ref(name)
        query = page_query(VERSION_LISTING, requested_size, page_token, filter_text, order_by)
        found = await self._repository.list_versions(
            project, location, model_id, query.where, query.order, query.size + 1, query.after
        )
        if found is None:
            raise _not_found(project, location, model_id)
        models, token = query.page(found, _version_value)
        return ListModelVersionsResponse(models=models, next_page_token=token)

    async def merge_aliases(
        self, project: str, location: str, name: str, aliases: list[str]
    ) -> Model:
        """Add (``x``) and remove (``-x``) aliases of the version ``name`` names (it must
        name one: ``{id}@{version or alias}``)."""
        model_id, ref = parse_model_ref(name)
        if ref is None:
            raise invalid("name", "name the version: models/{id}@{version or alias}")
        add = [alias for alias in aliases if not alias.startswith("-")]
        remove = [alias[1:] for alias in aliases if alias.startswith("-")]
        outcome, model = await self._repository.merge_aliases(
            project, location, model_id, ref, add, remove, datetime.now(UTC)
        )
        if model is None:
            raise _not_found(
                project, location, model_id, ref if outcome is Outcome.NO_VERSION else None
            )
        return model

    async def update(
        self, project: str, location: str, name: str, model: Model, fields: list[str]
    ) -> Model:
        """Change the ``fields`` of ``model`` (from :func:`validation.parse_update`):
        ``displayName`` and ``description`` are the model's, ``versionDescription`` and
        ``labels`` the version's (the default one when ``name`` names none)."""
        model_id, ref = parse_model_ref(name)
        model_fields = {
            field: str(getattr(model, field))
            for field in fields
            if field in ("display_name", "description")
        }
        version_fields: dict[str, object] = {
            field: getattr(model, field)
            for field in fields
            if field in ("version_description", "labels")
        }
        outcome, updated = await self._repository.update(
            project, location, model_id, ref, model_fields, version_fields, datetime.now(UTC)
        )
        if updated is None:
            raise _not_found(
                project, location, model_id, ref if outcome is Outcome.NO_VERSION else None
            )
        return updated

    async def delete(self, project: str, location: str, name: str) -> ModelOperation:
        """Delete a version (``{id}@{v}``: refused for the default while others exist; the
        last one takes the model with it) or a whole model (``{id}``)."""
        model_id, ref = parse_model_ref(name)
        resource = model_name(project, location, model_id)
        operation = ModelOperation(
            name=f"{resource}/operations/{new_job_id()}", response=ModelEmptyResponse()
        )
        now = datetime.now(UTC)
        if ref is None:
            outcome = await self._repository.delete_model(
                project, location, model_id, operation, now
            )
            if outcome is Outcome.NO_MODEL:
                raise _not_found(project, location, model_id)
            log.info("models.model_deleted", model=resource)
            return operation
        outcome, model_gone = await self._repository.delete_version(
            project, location, model_id, ref, operation, now
        )
        if outcome is Outcome.NO_MODEL:
            raise _not_found(project, location, model_id)
        if outcome is Outcome.NO_VERSION:
            raise _not_found(project, location, model_id, ref)
        if outcome is Outcome.DEFAULT_IN_USE:
            raise DefaultVersionInUse(
                f"{resource}@{ref} is the default version: make another version the default"
                " (mergeVersionAliases with 'default') before deleting it, or delete the model",
                details=[{"resource": f"{resource}@{ref}"}],
            )
        log.info("models.version_deleted", model=resource, version=ref, model_deleted=model_gone)
        return operation
