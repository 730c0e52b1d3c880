"""A Vertex AI SDK user's program (run in the SDK's own venv; nothing here imports mldiag).

``python vertex_sdk_client.py <api url> <token>`` submits, reads, lists, cancels and deletes a job
through ``google-cloud-aiplatform`` with the REST transport, and provokes the errors the
SDK must raise as its own exceptions; it prints one JSON object of what the SDK saw.
"""

import json
import sys
import time
from typing import Any

from google.api_core import exceptions
from google.cloud import aiplatform
from google.oauth2.credentials import Credentials


def _pools(machine_type: str = "n1-standard-4") -> list[dict[str, Any]]:
    return [
        {
            "machine_spec": {
                "machine_type": machine_type,
                "accelerator_type": "NVIDIA_TESLA_T4",
                "accelerator_count": 1,
            },
            "replica_count": 1,
            "container_spec": {"image_uri": "python", "command": ["python", "-c", "print(1)"]},
        }
    ]


def _refusal(job: aiplatform.CustomJob, **submit: Any) -> dict[str, str]:
    try:
        job.submit(**submit)
    except exceptions.GoogleAPICallError as error:
        return {"exception": type(error).__name__, "message": str(error)}
    return {"exception": "none", "message": ""}


def main(url: str, token: str) -> None:
    aiplatform.init(
        project="default",
        location="us-central1",
        api_endpoint=url,
        api_transport="rest",
        credentials=Credentials(token=token),
        staging_bucket="gs://mldiag-staging",
    )
    seen: dict[str, Any] = {}
    job = aiplatform.CustomJob(
        display_name="sdk-submit", worker_pool_specs=_pools(), labels={"team": "sdk"}
    )
    job.submit(timeout=3600, restart_job_on_worker_restart=True)
    seen["name"] = job.resource_name
    seen["state"] = job.state.name
    fetched = aiplatform.CustomJob.get(job.resource_name)
    seen["fetched"] = {
        "state": fetched.state.name,
        "labels": dict(fetched.labels),
        "accelerator": fetched.job_spec.worker_pool_specs[0].machine_spec.accelerator_type.name,
        "replicas": fetched.job_spec.worker_pool_specs[0].replica_count,
        "timeout": fetched.job_spec.scheduling.timeout.seconds,
        "output": fetched.job_spec.base_output_directory.output_uri_prefix,
    }
    seen["listed"] = [listed.resource_name for listed in aiplatform.CustomJob.list()]
    job.cancel()
    seen["after_cancel"] = aiplatform.CustomJob.get(job.resource_name).state.name
    for _ in range(100):  # a queued job has no replica to stop: the scheduler ends it
        if aiplatform.CustomJob.get(job.resource_name).state.name == "JOB_STATE_CANCELLED":
            break
        time.sleep(0.1)
    job.delete()  # a done long-running operation whose response is Empty
    try:
        aiplatform.CustomJob.get(job.resource_name)
    except exceptions.NotFound:
        seen["deleted"] = True
    bad = aiplatform.CustomJob(display_name="bad", worker_pool_specs=_pools("z9-imaginary"))
    seen["unknown_machine"] = _refusal(bad)
    vpc = aiplatform.CustomJob(display_name="vpc", worker_pool_specs=_pools())
    seen["network"] = _refusal(vpc, network="projects/1/global/networks/default")
    print(json.dumps(seen))  # noqa: T201  # the test reads this line


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
