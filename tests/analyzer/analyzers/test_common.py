"""Shared readings: the fast outlier search agrees with its plain definition."""

import random
import statistics

from analyzer.analyzer_contexts import host
from mldiag_analyzer.analyzers.common import step_outliers
from mldiag_schemas.events import HostSnapshot


def _plain(hosts: list[HostSnapshot]) -> set[str]:
    """The straggler rule's definition, host by host: 15% and 3 MADs above the peers."""
    slow = set()
    for h in hosts:
        peers = [p.step_time for p in hosts if p.host != h.host and p.step_time]
        if not peers or not h.step_time:
            continue
        median = statistics.median(peers)
        mad = statistics.median(abs(t - median) for t in peers)
        if h.step_time >= median * 1.15 and h.step_time > median + 3 * mad:
            slow.add(h.host)
    return slow


def test_fast_outliers_match_the_definition() -> None:
    rng = random.Random(7)
    for trial in range(300):
        count = rng.randint(2, 40)
        hosts = [
            host(f"h{i}", step_time=rng.choice([1.0, 1.0, 1.05, 1.2, 1.6, 3.0, rng.random() + 0.5]))
            for i in range(count)
        ]
        assert {o.host for o in step_outliers(hosts)} == _plain(hosts), trial


def test_outliers_slowest_first_with_their_peers_median() -> None:
    hosts = [host("a"), host("b"), host("c", step_time=1.5), host("d", step_time=2.0)]
    # peers of d: 1.0, 1.0, 1.5 (median 1.0, MAD 0): both c and d stand out
    assert [(o.host, o.peers_median) for o in step_outliers(hosts)] == [("d", 1.0), ("c", 1.0)]
    assert step_outliers([host("only", step_time=5.0)]) == []
