"""A Vertex AI SDK user's program (run in the SDK's own venv; nothing here imports mldiag).

``python vertex_sdk_client.py <api url> <token> <gs://bucket/prefix> <image>`` uploads
models and versions through ``google-cloud-aiplatform`` (REST transport), reads them by
``@version`` and ``@alias``, lists, updates, moves aliases through the versioning registry, deletes,
and provokes the refusal of an upload without files; it prints one JSON object of what the
SDK saw. ``<prefix>/v1`` and ``<prefix>/v2`` must hold files, ``<prefix>/empty`` none.
"""

import json
import sys
from typing import Any

from google.api_core import exceptions
from google.cloud import aiplatform
from google.oauth2.credentials import Credentials


def main() -> None:
    api, token, base, image = sys.argv[1:]
    aiplatform.init(
        project="default",
        location="us-central1",
        api_endpoint=api,
        api_transport="rest",
        credentials=Credentials(token=token),
    )
    seen: dict[str, Any] = {}
    first = aiplatform.Model.upload(
        display_name="e2e-model",
        artifact_uri=f"{base}/v1",
        serving_container_image_uri=image,
        labels={"team": "e2e"},
    )
    seen["first"] = [first.resource_name, first.version_id, list(first.version_aliases)]
    second = aiplatform.Model.upload(
        display_name="e2e-model",
        artifact_uri=f"{base}/v2",
        serving_container_image_uri=image,
        parent_model=first.resource_name,
        labels={"team": "e2e"},  # labels are a version's: the list filters the default's
    )
    seen["second"] = [second.resource_name, second.version_id, list(second.version_aliases)]
    third = aiplatform.Model.upload(
        display_name="e2e-model",
        artifact_uri=f"{base}/v1",
        serving_container_image_uri=image,
        parent_model=first.resource_name,
        is_default_version=False,
    )
    seen["third"] = [third.version_id, list(third.version_aliases)]
    model_id = first.resource_name.rsplit("/", 1)[-1]
    seen["listed"] = [m.resource_name for m in aiplatform.Model.list()]
    seen["listedFiltered"] = [
        m.resource_name for m in aiplatform.Model.list(filter='labels.team="e2e"')
    ]
    seen["default"] = aiplatform.Model(model_id).version_id
    at_one = aiplatform.Model(f"{model_id}@1")
    seen["atOne"] = [at_one.version_id, at_one.display_name, at_one.uri]
    registry = at_one.versioning_registry
    seen["versions"] = [v.version_id for v in registry.list_versions()]
    registry.add_version_aliases(["golden"], version="1")
    seen["golden"] = aiplatform.Model(f"{model_id}@golden").version_id
    seen["goldenInfo"] = list(registry.get_version_info("golden").version_aliases)
    registry.remove_version_aliases(["golden"], version="1")
    try:
        aiplatform.Model(f"{model_id}@golden")
        seen["goldenGone"] = None
    except exceptions.NotFound as error:
        seen["goldenGone"] = type(error).__name__
    try:
        aiplatform.Model.upload(
            display_name="nothing", artifact_uri=f"{base}/empty", serving_container_image_uri=image
        )
        seen["noFiles"] = None
    except exceptions.GoogleAPICallError as error:
        seen["noFiles"] = [type(error).__name__, error.message]
    registry.delete_version("3")
    seen["afterDelete"] = [v.version_id for v in registry.list_versions()]
    updated = aiplatform.Model(model_id).update(
        display_name="renamed", description="iris, twice", labels={"stage": "prod"}
    )
    seen["updated"] = [updated.display_name, updated.description, dict(updated.labels)]
    aiplatform.Model(model_id).delete()
    try:
        aiplatform.Model(model_id)
        seen["deleted"] = None
    except exceptions.NotFound as error:
        seen["deleted"] = type(error).__name__
    print(json.dumps(seen))  # noqa: T201


if __name__ == "__main__":
    main()
