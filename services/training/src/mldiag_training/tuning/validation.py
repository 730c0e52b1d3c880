"""Reading a HyperparameterTuningJob body as Vertex does, refusing what mldiag cannot honour
by name.

The order matters to what a caller hears first:

1. the body must be a JSON object;
2. Vertex fields mldiag knows but does not provide (``encryptionSpec``,
   ``studySpec.decayCurveStoppingSpec``, ``trialJobSpec.network``, ...) are UNIMPLEMENTED;
3. output-only fields a client sends back (``name``, ``state``, ``trials``, ...) are dropped;
4. the strict models refuse unknown fields and wrong types (INVALID_ARGUMENT);
5. ``parallelTrialCount`` may not exceed ``maxTrialCount``; the study spec must be
   searchable (:func:`search.check_study_spec`: a grid over a continuous range, a log scale
   over non-positive values, duplicate ids, a condition its parent can never meet, ...);
6. ``trialJobSpec`` is checked exactly as a custom job's ``jobSpec`` is.

Every refusal names its field, and nothing is stored.
"""

import re
from typing import Any

import pydantic_core
from pydantic.alias_generators import to_snake

from mldiag_platform.errors import InvalidArgument, MldiagError
from mldiag_platform.http import parse_body
from mldiag_schemas.tuning import (
    UNSUPPORTED_STUDY_SPEC_FIELDS,
    UNSUPPORTED_TUNING_JOB_FIELDS,
    HyperparameterTuningJob,
)
from mldiag_training.jobs.errors import UnsupportedField
from mldiag_training.jobs.validation import check_spec, refuse_unsupported
from mldiag_training.tuning.errors import InvalidTuningJob, UnsupportedTuningField
from mldiag_training.tuning.search import check_study_spec

OUTPUT_ONLY_FIELDS = frozenset(
    {"name", "state", "trials", "createTime", "startTime", "endTime", "updateTime", "error"}
)
"""HyperparameterTuningJob fields the service sets; a client's values are ignored."""
_OUTPUT_ONLY_SNAKE = frozenset(to_snake(name) for name in OUTPUT_ONLY_FIELDS)

TRIAL_LABELS = 2
"""Labels every trial's custom job gets beside the tuning job's (``mldiag-tuning-job``,
``mldiag-trial``): a job may carry 64 in all."""

_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


def _invalid(field: str, problem: str) -> InvalidTuningJob:
    return InvalidTuningJob(f"{field}: {problem}", details=[{"field": field, "problem": problem}])


def _get(document: Any, camel: str) -> Any:
    if not isinstance(document, dict):
        return None
    if camel in document:
        return document[camel]
    return document.get(to_snake(camel))


def _is_set(value: Any) -> bool:
    return value not in (None, "", False, 0, [], {})


def _refuse_in(document: Any, table: dict[str, str], where: str) -> None:
    """UNIMPLEMENTED for the first field of ``table`` set in ``document`` (fields holding
    their proto3 default are dropped: they are not set)."""
    if not isinstance(document, dict):
        return
    for camel, what in table.items():
        for key in (camel, to_snake(camel)):
            if key in document and not _is_set(document[key]):
                del document[key]
        if _is_set(_get(document, camel)):
            field = f"{where}.{camel}" if where else camel
            problem = f"is not supported: mldiag does not provide {what}"
            raise UnsupportedTuningField(
                f"{field} {problem}", details=[{"field": field, "problem": problem}]
            )


def as_trial_spec_error(error: MldiagError) -> MldiagError:
    """A custom job's ``jobSpec.…`` error said of ``trialJobSpec.…`` (machine types are
    checked this way too)."""

    def rename(text: str) -> str:
        return "trialJobSpec" + text[len("jobSpec") :] if text.startswith("jobSpec") else text

    details = [
        {**detail, "field": rename(str(detail["field"]))}
        if isinstance(detail, dict) and "field" in detail
        else detail
        for detail in error.details
    ]
    kind: type[MldiagError] = (
        UnsupportedTuningField if isinstance(error, UnsupportedField) else InvalidTuningJob
    )
    return kind(rename(error.message), details=details)


def _parse(document: dict[str, Any]) -> HyperparameterTuningJob:
    try:
        return parse_body(
            HyperparameterTuningJob, pydantic_core.to_json(document), error=InvalidTuningJob
        )
    except InvalidArgument as error:
        details = [
            {**detail, "field": _INDEX.sub(r"[\1]", str(detail.get("field", "")))}
            for detail in error.details
        ]
        if not details:
            raise
        first = details[0]
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        message = f"{first['field'] or 'the body'}: {first.get('problem', '')}{more}"
        raise InvalidTuningJob(message, details=details) from None


def parse_tuning_job(raw: bytes) -> HyperparameterTuningJob:
    """The HyperparameterTuningJob a create request's body describes (output-only fields
    dropped), or INVALID_ARGUMENT / UNIMPLEMENTED naming the field. Machine types are
    checked by the jobs service when the job is created."""
    try:
        document = pydantic_core.from_json(raw or b"{}")
    except ValueError as error:
        raise _invalid("", f"the body is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise _invalid("", "the body must be a JSON object (a HyperparameterTuningJob)")
    _refuse_in(document, UNSUPPORTED_TUNING_JOB_FIELDS, "")
    _refuse_in(_get(document, "studySpec"), UNSUPPORTED_STUDY_SPEC_FIELDS, "studySpec")
    trial_spec = _get(document, "trialJobSpec")
    if isinstance(trial_spec, dict):
        try:
            refuse_unsupported({"jobSpec": trial_spec})
        except MldiagError as error:
            raise as_trial_spec_error(error) from None
    kept = {
        key: value
        for key, value in document.items()
        if key not in OUTPUT_ONLY_FIELDS and key not in _OUTPUT_ONLY_SNAKE
    }
    job = _parse(kept)
    check_tuning_job(job)
    return job


def check_tuning_job(job: HyperparameterTuningJob) -> None:
    """The rules of a tuning job its model cannot say (see the module's docstring)."""
    if job.parallel_trial_count > job.max_trial_count:
        raise _invalid(
            "parallelTrialCount",
            f"{job.parallel_trial_count} is more than maxTrialCount ({job.max_trial_count})",
        )
    if len(job.labels) > 64 - TRIAL_LABELS:
        raise _invalid(
            "labels",
            f"at most {64 - TRIAL_LABELS} labels (every trial's job adds {TRIAL_LABELS})",
        )
    problems = check_study_spec(job.study_spec)
    if problems:
        details = [{"field": _in_study(field), "problem": problem} for field, problem in problems]
        first = details[0]
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        raise InvalidTuningJob(f"{first['field']}: {first['problem']}{more}", details=details)
    try:
        check_spec(job.trial_job_spec)
    except MldiagError as error:
        raise as_trial_spec_error(error) from None


def _in_study(field: str) -> str:
    return field if field.startswith("studySpec") else f"studySpec.{field}".rstrip(".")
