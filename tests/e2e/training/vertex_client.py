"""Drive the real ``google-cloud-aiplatform`` SDK against mldiag (run in the SDK's own venv).

``python vertex_client.py <api url> <token> <scenario>...`` prints one JSON object with what
the SDK saw in each scenario; the test beside this file asserts on it. One process runs them
all: importing the SDK alone takes seconds. Nothing here imports mldiag: this is a
Vertex user's program, pointed at our API with ``api_endpoint`` and the REST transport.
"""

import json
import sys
import time
from typing import Any

from google.cloud import aiplatform
from google.oauth2.credentials import Credentials

QUICK = "import os; print('hello from', os.environ['CLOUD_ML_JOB_ID'])"
SLEEPY = "import time; time.sleep(600)"
FAILING = "import sys; print('about to fail', file=sys.stderr); sys.exit(3)"


def _pool(code: str) -> list[dict[str, Any]]:
    return [
        {
            "machine_spec": {"machine_type": "e2-standard-4"},
            "replica_count": 1,
            "container_spec": {"image_uri": "python", "command": ["python", "-c", code]},
        }
    ]


def _state(job: aiplatform.CustomJob) -> str:
    return job.state.name  # type: ignore[no-any-return]


def run_to_success() -> dict[str, Any]:
    job = aiplatform.CustomJob(display_name="vertex-hello", worker_pool_specs=_pool(QUICK))
    job.run(sync=True)
    fetched = aiplatform.CustomJob.get(job.resource_name)
    listed = [listed_job.resource_name for listed_job in aiplatform.CustomJob.list()]
    return {
        "state": _state(job),
        "name": job.resource_name,
        "fetchedState": _state(fetched),
        "listed": job.resource_name in listed,
        "outputDir": job.job_spec.base_output_directory.output_uri_prefix,
    }


def submit_then_cancel() -> dict[str, Any]:
    job = aiplatform.CustomJob(display_name="vertex-cancel", worker_pool_specs=_pool(SLEEPY))
    job.submit()
    job.wait_for_resource_creation()
    job.cancel()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = _state(aiplatform.CustomJob.get(job.resource_name))
        if state == "JOB_STATE_CANCELLED":
            break
        time.sleep(0.5)
    return {"state": state, "name": job.resource_name}


def run_to_failure() -> dict[str, Any]:
    job = aiplatform.CustomJob(display_name="vertex-fail", worker_pool_specs=_pool(FAILING))
    try:
        job.run(sync=True)
    except RuntimeError as error:
        return {"raised": "RuntimeError", "message": str(error), "state": _state(job)}
    return {"raised": None, "state": _state(job)}


def enum_numbers() -> dict[str, Any]:
    from google.cloud.aiplatform_v1.types import (  # noqa: PLC0415
        AcceleratorType,
        JobState,
        Scheduling,
    )

    return {
        "JobState": {item.name: item.value for item in JobState},
        "AcceleratorType": {item.name: item.value for item in AcceleratorType},
        "Strategy": {item.name: item.value for item in Scheduling.Strategy},
    }


SCENARIOS = {
    "success": run_to_success,
    "cancel": submit_then_cancel,
    "failure": run_to_failure,
    "enums": enum_numbers,
}


def main() -> None:
    api, token, *scenarios = sys.argv[1:]
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
