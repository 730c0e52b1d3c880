"""Drive the real SDK's training classes against mldiag (run in the SDK's own venv).

``python vertex_pipelines_client.py <api url> <token> <scenario>...`` prints one JSON object
with what the SDK saw in each scenario, like ``vertex_client.py`` beside it. Nothing here
imports mldiag: this is a Vertex user's program.
"""

import json
import sys
import time
from typing import Any

from google.cloud import aiplatform
from google.oauth2.credentials import Credentials

WRITES_MODEL = (
    "import os; d = os.environ['AIP_MODEL_DIR']; os.makedirs(d, exist_ok=True); "
    "open(os.path.join(d, 'model.txt'), 'w').write('weights from ' + os.environ['CLOUD_ML_JOB_ID'])"
)
WRITES_NOTHING = "print('trained, saved nothing')"
PACKAGE = "gs://mldiag-staging/packages/trainer-0.1.tar.gz"
"""Put there by the test (the sdist's ``trainer.task`` writes its args as the model)."""
SERVING = "us-docker.pkg.dev/vertex-ai/prediction/sklearn-cpu.1-3:latest"


def _model(model: aiplatform.Model) -> dict[str, Any]:
    again = aiplatform.Model(f"{model.name}@1")
    return {
        "name": model.resource_name,
        "versionId": model.version_id,
        "displayName": model.display_name,
        "uri": model.uri,
        "againVersionId": again.version_id,
        "againName": again.resource_name,
        "againUri": again.uri,
    }


def _pipeline(job: aiplatform.training_jobs._TrainingJob) -> dict[str, Any]:
    resource = job.gca_resource
    return {
        "name": job.resource_name,
        "state": job.state.name,
        "backingCustomJob": resource.training_task_metadata.get("backingCustomJob"),
    }


def container() -> dict[str, Any]:
    job = aiplatform.CustomContainerTrainingJob(
        display_name="e2e-container",
        container_uri="python",
        command=["python", "-c", WRITES_MODEL],
        model_serving_container_image_uri=SERVING,
    )
    model = job.run(
        replica_count=1, machine_type="e2-standard-4", model_display_name="e2e-container-model"
    )
    return {"model": _model(model), "pipeline": _pipeline(job)}


def python_package() -> dict[str, Any]:
    job = aiplatform.CustomPythonPackageTrainingJob(
        display_name="e2e-package",
        python_package_gcs_uri=PACKAGE,
        python_module_name="trainer.task",
        container_uri="python",
        model_serving_container_image_uri=SERVING,
    )
    model = job.run(
        args=["--units", "64"],
        replica_count=1,
        machine_type="e2-standard-4",
        model_display_name="e2e-package-model",
    )
    return {"model": _model(model), "pipeline": _pipeline(job)}


def no_model() -> dict[str, Any]:
    job = aiplatform.CustomContainerTrainingJob(
        display_name="e2e-no-model",
        container_uri="python",
        command=["python", "-c", WRITES_NOTHING],
        model_serving_container_image_uri=SERVING,
    )
    try:
        job.run(replica_count=1, machine_type="e2-standard-4", model_display_name="never")
    except RuntimeError as error:
        return {"raised": "RuntimeError", "message": str(error), "pipeline": _pipeline(job)}
    return {"raised": None, "pipeline": _pipeline(job)}


def cancel() -> dict[str, Any]:
    job = aiplatform.CustomContainerTrainingJob(
        display_name="e2e-cancel",
        container_uri="python",
        command=["python", "-c", "import time; time.sleep(600)"],
        model_serving_container_image_uri=SERVING,
    )
    job.run(replica_count=1, machine_type="e2-standard-4", model_display_name="never", sync=False)
    job.wait_for_resource_creation()
    job.cancel()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = aiplatform.CustomContainerTrainingJob.get(job.resource_name).state.name
        if state == "PIPELINE_STATE_CANCELLED":
            break
        time.sleep(0.5)
    listed = [found.resource_name for found in aiplatform.CustomContainerTrainingJob.list()]
    return {"state": state, "listed": job.resource_name in listed, "pipeline": _pipeline(job)}


SCENARIOS = {
    "container": container,
    "package": python_package,
    "no_model": no_model,
    "cancel": cancel,
}


def main() -> None:
    api, token, *scenarios = sys.argv[1:]
    # The SDK polls a pipeline every 5 s; trainers here take about one: poll every second
    # (what is sent and read is unchanged).
    aiplatform.training_jobs._JOB_WAIT_TIME = 1
    aiplatform.init(
        project="default",
        location="us-central1",
        api_endpoint=api,
        api_transport="rest",
        credentials=Credentials(token=token),
        staging_bucket="gs://mldiag-staging",
    )
    print(json.dumps({scenario: SCENARIOS[scenario]() for scenario in scenarios}))  # noqa: T201


if __name__ == "__main__":
    main()
