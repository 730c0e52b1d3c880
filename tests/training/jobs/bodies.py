"""CustomJob bodies as the Vertex SDK sends them, for the jobs tests."""

from typing import Any


def container_pool(replicas: str = "1", machine: str = "n1-standard-4") -> dict[str, Any]:
    """A pool running a container, as the SDK sends it."""
    return {
        "machineSpec": {"machineType": machine},
        "replicaCount": replicas,
        "containerSpec": {"imageUri": "python:3.12", "command": ["python", "-c", "print(1)"]},
    }


def sdk_job(**spec: Any) -> dict[str, Any]:
    """A CustomJob body as the Vertex SDK sends it (``.run()`` with a staging bucket)."""
    return {
        "displayName": "train",
        "jobSpec": {
            "workerPoolSpecs": [container_pool()],
            "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/aiplatform-custom-job-1"},
            **spec,
        },
    }
