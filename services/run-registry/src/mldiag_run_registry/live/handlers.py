"""HTTP routes of live updates: server-sent event streams of :class:`RunUpdate` hints.

A stream starts with a ``ready`` event (a client refetches what it shows then: anything that
changed while it was away), then sends ``update`` events (and ``ready`` again if it fell so
far behind that hints were dropped), and a comment every
``KEEP_ALIVE_SECONDS`` so proxies and browsers keep the connection open. It ends when the
client leaves or the server stops; clients reconnect.
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import StreamingResponse

from mldiag_platform.http import EVENT_STREAM, stopping_event
from mldiag_platform.resources import ParentDep, route
from mldiag_run_registry.live.service import LiveFeed
from mldiag_run_registry.resources import RunIdPath
from mldiag_run_registry.runs.service import RunService
from mldiag_schemas.auth import Permission

router = APIRouter()

KEEP_ALIVE_SECONDS = 15.0
RECONNECT_MILLISECONDS = 2000

READY = "event: ready\ndata: {}\n\n"
"""Refetch everything you show: sent first, and again after hints had to be dropped."""

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _feed(request: Request) -> LiveFeed:
    feed: LiveFeed = request.app.state.live
    return feed


def _runs(request: Request) -> RunService:
    runs: RunService = request.app.state.runs
    return runs


FeedDep = Annotated[LiveFeed, Depends(_feed)]
RunsDep = Annotated[RunService, Depends(_runs)]


async def _events(request: Request, feed: LiveFeed, run_id: RunIdPath | None) -> AsyncIterator[str]:
    stopping = stopping_event(request.app)
    with feed.listening(run_id) as listener:
        yield f"retry: {RECONNECT_MILLISECONDS}\n{READY}"
        stop = asyncio.ensure_future(stopping.wait())
        try:
            while True:
                get = asyncio.ensure_future(listener.queue.get())
                done, _ = await asyncio.wait(
                    {get, stop}, timeout=KEEP_ALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
                if get in done:
                    yield f"event: update\ndata: {get.result().model_dump_json()}\n\n"
                    if listener.caught_up_after_missing():
                        yield READY  # some hints were dropped: refetch everything
                    continue
                get.cancel()
                if stop in done or await request.is_disconnected():
                    return
                yield ": keep-alive\n\n"
        finally:
            stop.cancel()


def _stream(request: Request, feed: LiveFeed, run_id: RunIdPath | None) -> Response:
    return StreamingResponse(
        _events(request, feed, run_id), media_type="text/event-stream", headers=_HEADERS
    )


@route(router, "GET", "/machineLearningRuns:watch", Permission.RUNS_LIST, responses=EVENT_STREAM)
async def watch_runs(request: Request, feed: FeedDep) -> Response:
    """A stream of ``run`` hints about every run (runs list pages)."""
    return _stream(request, feed, None)


@route(
    router,
    "GET",
    "/machineLearningRuns/{run_id}:watch",
    Permission.RUNS_GET,
    responses=EVENT_STREAM,
)
async def watch_run(
    run_id: RunIdPath, request: Request, parent: ParentDep, feed: FeedDep, runs: RunsDep
) -> Response:
    """A stream of every hint about one run (404 for a run that does not exist)."""
    await runs.get_run(parent.project, parent.location, run_id)
    return _stream(request, feed, run_id)
