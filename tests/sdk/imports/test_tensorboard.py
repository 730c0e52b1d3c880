"""Reading real event files written by tensorboardX: scalars of every encoding with their
steps and wall times, what is not a scalar counted, runs named after their directories."""

import shutil
from pathlib import Path

import pytest

from mldiag.imports.errors import SourceUnreadable
from mldiag.imports.tensorboard import find_runs, read_logdir
from sdk.imports.event_files import expected_values, write_run

START = 1_760_000_000.0


def test_every_scalar_encoding_is_read_with_its_step_and_wall_time(tmp_path: Path) -> None:
    write_run(tmp_path / "train", range(20), start=START)
    (run,) = read_logdir(tmp_path)
    assert run.display_name == "train"
    assert run.run_set == tmp_path.name
    assert sorted(run.metrics) == ["acc/top1", "loss", "lr"]
    for metric, points in run.metrics.items():
        assert [point.step for point in points] == list(range(20))
        assert [point.time for point in points] == [START + step for step in range(20)]
        assert [point.value for point in points] == [
            expected_values(metric, step) for step in range(20)
        ]
    assert run.skipped == {"histograms": 20, "images": 20, "text plugin tensors": 20}
    assert run.problems == []


def test_each_directory_with_event_files_is_a_run(tmp_path: Path) -> None:
    write_run(tmp_path, range(2), start=START)
    write_run(tmp_path / "b" / "seed-1", range(3), start=START)
    write_run(tmp_path / "a", range(4), start=START)
    (tmp_path / "empty").mkdir()
    assert [relative for relative, _ in find_runs(tmp_path)] == [".", "a", "b/seed-1"]
    runs = list(read_logdir(tmp_path, run_set="sweep", run_prefix="tb/"))
    assert [run.display_name for run in runs] == [f"tb/{tmp_path.name}", "tb/a", "tb/b/seed-1"]
    assert {run.run_set for run in runs} == {"sweep"}
    assert [len(run.metrics["loss"]) for run in runs] == [2, 4, 3]


def test_run_ids_come_from_the_directory_so_a_rerun_finds_the_same_runs(tmp_path: Path) -> None:
    write_run(tmp_path / "x", range(1), start=START)
    first = [run.run_id for run in read_logdir(tmp_path)]
    assert first == [run.run_id for run in read_logdir(tmp_path)]
    assert first[0].startswith("tb-")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-copy"
    shutil.copytree(tmp_path, elsewhere)
    assert [run.run_id for run in read_logdir(elsewhere)] != first


def test_a_restarted_writer_adds_a_second_file_to_the_same_run(tmp_path: Path) -> None:
    write_run(tmp_path, range(5), start=START)
    write_run(tmp_path, range(5, 8), start=START, suffix=".restart")
    ((_, files),) = find_runs(tmp_path)
    assert len(files) == 2
    (run,) = read_logdir(tmp_path)
    assert sorted(point.step for point in run.metrics["loss"]) == list(range(8))


def test_a_file_still_being_written_is_read_up_to_its_last_whole_record(tmp_path: Path) -> None:
    write_run(tmp_path, range(10), start=START)
    ((_, (path,)),) = find_runs(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # the last record lost its tail
    (run,) = read_logdir(tmp_path)
    assert run.problems == []
    assert [point.step for point in run.metrics["loss"]] == list(range(10))
    assert len(run.metrics["acc/top1"]) == 9  # the cut record was the last step's last scalar


def test_a_damaged_file_keeps_what_came_before_and_says_where(tmp_path: Path) -> None:
    write_run(tmp_path, range(10), start=START)
    ((_, (path,)),) = find_runs(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    (run,) = read_logdir(tmp_path)
    assert len(run.problems) == 1
    assert "corrupt record at byte" in run.problems[0]
    assert 0 < len(run.metrics["loss"]) < 10


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceUnreadable):
        list(read_logdir(tmp_path / "nothing"))
