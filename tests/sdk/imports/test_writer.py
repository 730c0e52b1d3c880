"""How the importer cuts a metric into batches: fixed, deterministic, never inside a step."""

import itertools
import random

from mldiag.imports.source import Point, label_key, metric_name, readable_run_id
from mldiag.imports.writer import batch_id, chunks


def test_chunks_are_sorted_fixed_and_never_split_a_step() -> None:
    points = [Point(step // 3, float(step), float(step)) for step in range(300)]  # 3 per step
    shuffled = points[:]
    random.Random(7).shuffle(shuffled)
    cut = list(chunks(shuffled, size=10))
    assert [point for chunk in cut for point in chunk.points] == points
    assert [chunk.index for chunk in cut] == list(range(len(cut)))
    for before, after in itertools.pairwise(cut):
        assert before.points[-1].step < after.points[0].step
        assert len(before.points) in (10, 11, 12)
    assert cut == list(chunks(list(reversed(points)), size=10))  # the same cut every time


def test_batch_ids_are_the_same_for_the_same_chunk_only() -> None:
    first = batch_id("tb-1", "loss", 0, 0, 5000)
    assert first == batch_id("tb-1", "loss", 0, 0, 5000)
    others = {
        batch_id("tb-2", "loss", 0, 0, 5000),
        batch_id("tb-1", "acc", 0, 0, 5000),
        batch_id("tb-1", "loss", 1, 0, 5000),
        batch_id("tb-1", "loss", 0, 10, 5000),
        batch_id("tb-1", "loss", 0, 0, 4999),
    }
    assert first not in others
    assert len(others) == 5


def test_names_are_made_acceptable() -> None:
    assert metric_name("train/loss") == "train/loss"
    assert metric_name("val loss (avg)") == "val_loss__avg_"
    assert metric_name("1st") == "_1st"
    assert label_key("Team Name") == "team_name"
    assert label_key("9lives") == "k_9lives"
    assert readable_run_id("mlflow", "0123abcd") == "mlflow-0123abcd"
    assert readable_run_id("mlflow", "Not_Valid").startswith("mlflow-")
    assert readable_run_id("mlflow", "Not_Valid") != "mlflow-not_valid"
