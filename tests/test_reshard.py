"""An elastic restart's remainder: taken from every worker's saved stream state at a
checkpoint and dealt to another number of ranks and workers, it is exactly the samples the job
had not delivered, each once (a brute-force set comparison over the whole epoch)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import write_export

from dsbench import adapters
from dsbench.loader.order import Plan, SampleStream
from dsbench.resume.reshard import PieceStream, deal, remainder

EPOCH, SEED = 0, 7


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> adapters.Export:
    return adapters.open_export(write_export(tmp_path_factory.mktemp("reshard"), "wds", 240,
                                             shard_samples=20))


def _drain(stream: SampleStream | PieceStream, limit: int | None = None) -> list[str]:
    keys = []
    while limit is None or len(keys) < limit:
        got = stream.next()
        if got is None:
            break
        keys.append(got[0].key)
    return keys


@pytest.mark.parametrize(("ranks", "workers", "after", "buffer", "taken"), [
    (4, 1, (2, 1), 8, 13),   # a node of two lost: 4 ranks become 2
    (2, 2, (3, 1), 16, 5),   # more ranks, fewer workers
    (3, 1, (1, 2), 0, 20),   # no shuffle buffer; a whole unit read by some workers
    (2, 1, (2, 3), 8, 0),    # a checkpoint before any sample
])
def test_the_remainder_dealt_anew_is_every_undelivered_sample_once(
        export: adapters.Export, ranks: int, workers: int, after: tuple[int, int],
        buffer: int, taken: int) -> None:
    plan = Plan(tuple(export.units()), SEED, ranks, workers, 4, buffer, "shard")
    delivered: Counter[str] = Counter()
    states = []
    for r in range(ranks):
        row = []
        for w in range(workers):
            stream = SampleStream(export, plan, r, w, EPOCH)
            delivered.update(_drain(stream, taken))
            row.append(stream.state())
        states.append(row)
    epoch = {raw.key for raw in export.read_units(export.units())}
    assert sum(delivered.values()) == ranks * workers * taken
    pieces = remainder(plan, EPOCH, states)
    dealt = deal(pieces, SEED, EPOCH, *after)
    assert len(dealt) == after[0] and all(len(row) == after[1] for row in dealt)
    rest: Counter[str] = Counter()
    for r, row in enumerate(dealt):
        for w, mine in enumerate(row):
            rest.update(_drain(PieceStream(export, mine, buffer,
                                           np.random.default_rng([SEED, r, w]))))
    both = delivered + rest
    assert set(both) == epoch  # nothing skipped
    assert max(both.values()) == 1  # nothing replayed


def test_a_finished_worker_owes_nothing(export: adapters.Export) -> None:
    plan = Plan(tuple(export.units()), SEED, 2, 1, 4, 8, "shard")
    states = []
    for r in range(2):
        stream = SampleStream(export, plan, r, 0, EPOCH)
        _drain(stream)
        states.append([stream.state()])
    assert remainder(plan, EPOCH, states) == []


def test_dealing_is_deterministic_and_rank_first(tmp_path: Path) -> None:
    pieces = [(f"u{i}", 0, None) for i in range(10)]
    a = deal(pieces, 1, 0, 2, 2)
    assert a == deal(pieces, 1, 0, 2, 2)
    flat = sorted(p for row in a for mine in row for p in mine)
    assert flat == sorted(pieces)
    assert deal(pieces, 2, 0, 2, 2) != a
