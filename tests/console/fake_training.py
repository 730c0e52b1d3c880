"""A stand-in for the training service's read API, for the Jobs page's browser tests only.

It serves recorded jobs, replicas and logs in exactly the contract's shapes: every answer is
built from the pydantic models of ``mldiag_schemas.jobs`` (``CustomJob``, ``Replica``, the list
responses, ``VertexErrorBody``) and serialised the way a contract is, never hand-written JSON.
The test changes the recorded state (a job ends, a replica restarts, a log grows) and watches
the page follow. Cancel moves a job to CANCELLING, as the real scheduler does until every
replica has stopped; the test then ends it.

Paths are the training API's (``/v1/projects/{p}/locations/{l}/customJobs...``); the browser
reaches them on the console's own origin through a Playwright route, as it would through the
edge of ``mldiag up``.
"""

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from mldiag_schemas.jobs import (
    CustomJob,
    JobState,
    ListCustomJobsResponse,
    ListReplicasResponse,
    Replica,
    VertexErrorBody,
    VertexErrorStatus,
)

PREFIX = "/v1/projects/{project}/locations/{location}/customJobs"


def _json(model: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"), status_code=status)


def _not_found(what: str) -> JSONResponse:
    body = VertexErrorBody(
        error=VertexErrorStatus(code=404, message=f"{what} not found", status="NOT_FOUND")
    )
    return _json(body, 404)


@dataclass
class Recorded:
    """What the fake serves; tests change it through the methods (thread-safe)."""

    jobs: dict[tuple[str, str, str], CustomJob] = field(default_factory=dict)
    replicas: dict[str, list[Replica]] = field(default_factory=dict)
    logs: dict[tuple[str, str], str] = field(default_factory=dict)
    cancels: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, job: CustomJob, replicas: list[Replica], logs: dict[str, str]) -> None:
        project, location, job_id = _parts(job.name)
        with self.lock:
            self.jobs[(project, location, job_id)] = job
            self.replicas[job_id] = replicas
            for replica, text in logs.items():
                self.logs[(job_id, replica)] = text

    def job(self, job_id: str) -> CustomJob:
        with self.lock:
            return next(job for key, job in self.jobs.items() if key[2] == job_id)

    def update(self, job_id: str, **changes: Any) -> None:
        """Change a job's output fields (``state``, ``end_time``, ``error``...)."""
        with self.lock:
            for key, job in self.jobs.items():
                if key[2] == job_id:
                    now = datetime.now(UTC)
                    self.jobs[key] = job.model_copy(update={"update_time": now, **changes})

    def end_all(self) -> None:
        """Cancel every job that has not ended (followed logs end with their job)."""
        with self.lock:
            for key, job in self.jobs.items():
                if not job.state.terminal:
                    self.jobs[key] = job.model_copy(update={"state": JobState.CANCELLED})

    def set_replicas(self, job_id: str, replicas: list[Replica]) -> None:
        with self.lock:
            self.replicas[job_id] = replicas

    def log(self, job_id: str, replica: str, text: str) -> None:
        """Append ``text`` to a replica's log (a follower sees it)."""
        with self.lock:
            self.logs[(job_id, replica)] = self.logs.get((job_id, replica), "") + text


def _parts(name: str) -> tuple[str, str, str]:
    _, project, _, location, _, job_id = name.split("/")
    return project, location, job_id


def create_fake_training(recorded: Recorded) -> FastAPI:
    """The fake's app: list, get, cancel, replicas and logs (``follow=true`` streams)."""
    app = FastAPI()

    def find(project: str, location: str, job_id: str) -> CustomJob | None:
        with recorded.lock:
            return recorded.jobs.get((project, location, job_id))

    @app.get(PREFIX)
    async def list_jobs(project: str, location: str) -> Response:
        with recorded.lock:
            jobs = [job for key, job in recorded.jobs.items() if key[:2] == (project, location)]
        return _json(ListCustomJobsResponse(custom_jobs=jobs))

    @app.post(PREFIX + "/{job_id}:cancel")
    async def cancel(project: str, location: str, job_id: str, request: Request) -> Response:
        job = find(project, location, job_id)
        if job is None:
            return _not_found(f"customJob {job_id}")
        auth = request.headers.get("authorization", "")
        recorded.cancels.append(auth.removeprefix("Bearer "))
        if not job.state.terminal:
            recorded.update(job_id, state=JobState.CANCELLING)
        return JSONResponse({})

    @app.get(PREFIX + "/{job_id}/replicas")
    async def replicas(project: str, location: str, job_id: str) -> Response:
        if find(project, location, job_id) is None:
            return _not_found(f"customJob {job_id}")
        with recorded.lock:
            listed = list(recorded.replicas.get(job_id, []))
        return _json(ListReplicasResponse(replicas=listed))

    @app.get(PREFIX + "/{job_id}/logs")
    async def logs(
        project: str, location: str, job_id: str, replica: str, follow: bool = False
    ) -> Response:
        if find(project, location, job_id) is None:
            return _not_found(f"customJob {job_id}")
        key = (job_id, replica)
        with recorded.lock:
            text = recorded.logs.get(key)
        if text is None:
            return _not_found(f"log of {replica}")
        if not follow:
            return PlainTextResponse(text)

        async def tail() -> AsyncIterator[str]:
            sent = 0
            while True:
                with recorded.lock:
                    now = recorded.logs.get(key, "")
                    ended = recorded.jobs[(project, location, job_id)].state.terminal
                if len(now) > sent:
                    yield now[sent:]
                    sent = len(now)
                if ended:
                    return
                await asyncio.sleep(0.1)

        return StreamingResponse(tail(), media_type="text/plain; charset=utf-8")

    @app.get(PREFIX + "/{job_id}")
    async def get_job(project: str, location: str, job_id: str) -> Response:
        job = find(project, location, job_id)
        return _not_found(f"customJob {job_id}") if job is None else _json(job)

    return app


def ago(seconds: float) -> datetime:
    """A time ``seconds`` before now (recorded jobs started a while ago)."""
    return datetime.now(UTC) - timedelta(seconds=seconds)
