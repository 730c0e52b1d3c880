"""``mldiag import tensorboard``'s writer against the real run-registry and ingestion (real
NATS and PostgreSQL): event files written by tensorboardX are imported, read back point by
point, and imported again after a crash half-way without a point stored twice."""

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mldiag.api_client import RegistryClient
from mldiag.imports.tensorboard import read_logdir
from mldiag.imports.writer import Importer
from mldiag.transport import client as ingestion_client
from sdk.cli.conftest import Platform
from sdk.imports.event_files import expected_values, write_run
from sdk.imports.platform_reads import read_points, wait_for_counts

pytestmark = pytest.mark.connected

STEPS = 400
METRICS = ("acc/top1", "loss", "lr")


class Crash(Exception):
    """The importer's process dying half-way."""


class CrashAfter(httpx.HTTPTransport):
    """The real transport, until ``posts`` metric batches have gone out."""

    def __init__(self, posts: int) -> None:
        super().__init__()
        self.left = posts

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("metrics:write"):
            if self.left == 0:
                raise Crash
            self.left -= 1
        return super().handle_request(request)


@pytest.fixture
def registry(platform_apps: Platform) -> Iterator[RegistryClient]:
    with RegistryClient(platform_apps.api_url, token=platform_apps.tokens.admin) as client:
        yield client


def importer(platform: Platform, registry: RegistryClient, http: httpx.Client) -> Importer:
    return Importer(registry, http, platform.ingestion_url, chunk_points=50, sleep=lambda _: None)


def test_scalars_are_stored_with_their_steps_and_wall_times(
    platform_apps: Platform, registry: RegistryClient, tmp_path: Path
) -> None:
    start = time.time() - 3600
    write_run(tmp_path / "logs" / "run-a", range(STEPS), start=start)
    (run,) = read_logdir(tmp_path / "logs", run_set="tb-import")
    with ingestion_client(platform_apps.tokens.admin, 30.0) as http:
        report = importer(platform_apps, registry, http).write(run)
    assert report.created
    assert (report.points_read, report.points_sent, report.points_present) == (1200, 1200, 0)
    assert report.skipped == {"histograms": STEPS, "images": STEPS, "text plugin tensors": STEPS}

    described = registry.get_run(run.run_id)
    assert (described["displayName"], described["runSet"]) == ("run-a", "tb-import")
    assert described["labels"] == {"imported-from": "tensorboard"}
    assert described["configs"]["softwareConfigs"]["tensorboard"]["run"] == "run-a"
    assert described["runPhase"] == "COMPLETED"
    wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, STEPS))
    for metric in METRICS:
        stored = read_points(registry, run.run_id, metric)
        assert [step for step, _, _ in stored] == list(range(STEPS))
        assert [value for _, value, _ in stored] == [
            expected_values(metric, step) for step in range(STEPS)
        ]
        assert [when for _, _, when in stored] == pytest.approx(
            [start + step for step in range(STEPS)], abs=1e-6
        )


def test_an_import_cut_half_way_and_run_again_stores_every_point_once(
    platform_apps: Platform, registry: RegistryClient, tmp_path: Path
) -> None:
    start = time.time() - 3600
    write_run(tmp_path, range(STEPS), start=start)
    (run,) = read_logdir(tmp_path)
    token = platform_apps.tokens.admin
    headers = {"Authorization": f"Bearer {token}"}
    crashing = httpx.Client(transport=CrashAfter(10), headers=headers)
    with crashing, pytest.raises(Crash):
        importer(platform_apps, registry, crashing).write(run)

    # At once, while the registry may still be consuming the first batches: what it has
    # not stored yet is sent again under the same batch ids, and dropped as a duplicate.
    with ingestion_client(token, 30.0) as http:
        again = importer(platform_apps, registry, http).write(run)
    assert not again.created
    assert again.points_sent + again.points_present == 1200
    assert again.points_sent >= 1200 - 10 * 50
    wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, STEPS))
    for metric in METRICS:
        assert [step for step, _, _ in read_points(registry, run.run_id, metric)] == list(
            range(STEPS)
        )

    # Once everything is stored, a third import sends nothing at all.
    with ingestion_client(token, 30.0) as http:
        third = importer(platform_apps, registry, http).write(run)
    assert (third.points_sent, third.points_present, third.batches_sent) == (0, 1200, 0)


class Forgetful(Importer):
    """An importer that never asks what the platform holds: it resends every batch."""

    def _present_steps(self, run_id: str) -> dict[str, int]:  # noqa: ARG002  # asks nothing
        return {}


def test_the_platform_drops_a_batch_sent_again_by_its_id_not_by_its_steps(
    platform_apps: Platform, registry: RegistryClient, tmp_path: Path
) -> None:
    write_run(tmp_path, range(100), start=time.time() - 3600)
    (run,) = read_logdir(tmp_path)
    with ingestion_client(platform_apps.tokens.admin, 30.0) as http:
        first = importer(platform_apps, registry, http).write(run)
        wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, 100))
        resent = Forgetful(registry, http, platform_apps.ingestion_url, chunk_points=50).write(run)
        assert (first.points_sent, resent.points_sent) == (300, 300)
        wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, 100))  # the same ids: dropped

        # The same points in other batches (another chunk size, so other ids) are stored
        # again: the registry keeps every point it is sent, deduplication is by batch id.
        Forgetful(registry, http, platform_apps.ingestion_url, chunk_points=40).write(run)
    wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, 200))


def test_a_run_that_grew_sends_only_its_new_steps(
    platform_apps: Platform, registry: RegistryClient, tmp_path: Path
) -> None:
    start = time.time() - 3600
    write_run(tmp_path, range(120), start=start)
    with ingestion_client(platform_apps.tokens.admin, 30.0) as http:
        (run,) = read_logdir(tmp_path)
        importer(platform_apps, registry, http).write(run)
        wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, 120))
        write_run(tmp_path, range(120, 170), start=start, suffix=".resumed")
        (grown,) = read_logdir(tmp_path)
        report = importer(platform_apps, registry, http).write(grown)
    assert (report.points_sent, report.points_present) == (150, 360)
    wait_for_counts(registry, run.run_id, dict.fromkeys(METRICS, 170))
    assert [step for step, _, _ in read_points(registry, run.run_id, "loss")] == list(range(170))
