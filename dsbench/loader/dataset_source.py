"""`bench --dataset MODULE:FACTORY`: a user's own torch Dataset, measured as a black box.

`FACTORY()` is called in the main process, as a training script builds its dataset, and the
result goes to torch's DataLoader with the bench's batch size, workers and prefetch (workers
forked from a server that imported torch once: forks.py) and dsbench's collate: torch's
default_collate, timed, plus the report every batch carries (the worker's CPU from getrusage,
its read_chars), so the windows, rounds, OS accounting and statistics are the loader
benchmark's own. A map-style dataset is read by a sampler that runs over its indices in order,
epoch after epoch (torch hands batch i to worker i mod W); an iterable one is iterated again
when it ends, and splits itself over the workers as it does in the job (torch's worker info).
Everything the dataset does is the `read` stage; collation is `collate`. What the dataset reads
is its own business: bytes are its process's read_chars over the window, and files and
requests are not counted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from dsbench import procs
from dsbench.errors import DsbenchError
from dsbench.loader import forks
from dsbench.loader.sources import STARTUP_STALL_S
from dsbench.loader.torch_source import more_workers_than_cores, shutdown, worker_error
from dsbench.loader.user import load
from dsbench.loader.worker import BatchReport, cpu_now, read_chars
from dsbench.results.stages import STAGES

_last = {"cpu": 0.0, "wall": 0.0}


def make(spec: str) -> Any:
    """The user's dataset, built by their factory; one line when that fails."""
    factory = load(spec, "--dataset")
    try:
        dataset = factory()
    except Exception as exc:  # the user's code, whatever it raised
        raise DsbenchError(f"--dataset {spec}: the factory raised {type(exc).__name__}: "
                           f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                           ) from None
    if not (hasattr(dataset, "__iter__") or hasattr(dataset, "__getitem__")):
        raise DsbenchError(f"--dataset {spec}: the factory returned a {type(dataset).__name__}, "
                           "not a Dataset or IterableDataset")
    return dataset


def report_collate(items: list[Any]) -> dict[str, Any]:
    """torch's default_collate, timed, with the batch's report (in the loader worker)."""
    from torch.utils.data import default_collate, get_worker_info

    c0 = time.process_time()
    batch = default_collate(items)
    c1, w1 = time.process_time(), time.perf_counter()
    info = get_worker_info()
    stages = [0.0] * len(STAGES)
    stages[STAGES.index("collate")] = c1 - c0
    cpu = c1 - _last["cpu"] if _last["cpu"] else c1 - c0
    stages[STAGES.index("read")] = max(0.0, cpu - (c1 - c0))
    wall = w1 - _last["wall"] if _last["wall"] else cpu
    _last["cpu"], _last["wall"] = c1, w1
    report = BatchReport(info.id if info else 0, -1, -1, [""] * len(items), stages, cpu, wall,
                         w1, cpu_now(), read_chars(), 0, 0, 0, [], None)
    return {"batch": batch, "report": report}


def _worker_init(_: int) -> None:
    procs.settle_heap()
    _last["cpu"], _last["wall"] = time.process_time(), time.perf_counter()


def _make_classes() -> tuple[type, type]:
    from torch.utils.data import IterableDataset, Sampler, get_worker_info

    class Epochs(IterableDataset):
        """An iterable dataset iterated again each time it ends (epochs)."""

        def __init__(self, dataset: Any) -> None:
            self.dataset = dataset

        def __iter__(self) -> Iterator[Any]:
            first = True
            while True:
                n = 0
                for item in self.dataset:
                    n += 1
                    yield item
                if n == 0 and first:
                    # Nothing for this worker (an iterable dataset with fewer shards than
                    # workers): it ends, as under a training loop, and is reported idle.
                    return
                if n == 0:
                    info = get_worker_info()
                    raise DsbenchError(
                        "the dataset yielded nothing in loader worker "
                        f"{info.id if info else 0} of {info.num_workers if info else 1} after "
                        "an epoch that yielded samples")
                first = False

    class Cycle(Sampler):
        """A map-style dataset's indices in order, epoch after epoch."""

        def __init__(self, n: int) -> None:
            self.n = n

        def __iter__(self) -> Iterator[int]:
            while True:
                yield from range(self.n)

    for cls in (Epochs, Cycle):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return Epochs, Cycle


def __getattr__(name: str) -> Any:
    # Made on first use, so that importing this module never imports torch (and found here
    # again by pickle in the spawned workers).
    if name in ("Epochs", "Cycle"):
        globals().update(zip(("Epochs", "Cycle"), _make_classes(), strict=True))
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class DatasetSource:
    """The user's dataset in torch's DataLoader; batches come out with their reports."""

    def __init__(self, spec: str, n_workers: int, opts: Any) -> None:
        from torch.utils.data import DataLoader, IterableDataset

        epochs, cycle = __getattr__("Epochs"), globals()["Cycle"]
        dataset = make(spec)
        kwargs: dict[str, Any] = {}
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            dataset = epochs(dataset)
        else:
            if len(dataset) == 0:
                raise DsbenchError(f"--dataset {spec}: the dataset is empty")
            kwargs["sampler"] = cycle(len(dataset))
        with more_workers_than_cores():
            self.loader = DataLoader(dataset, batch_size=opts.batch_size,
                                     num_workers=n_workers, prefetch_factor=opts.prefetch,
                                     collate_fn=report_collate, worker_init_fn=_worker_init,
                                     multiprocessing_context=forks.context(
                                         ["torch", "dsbench.loader.dataset_source"]),
                                     timeout=opts.stall_s or STARTUP_STALL_S, **kwargs)
        # Workers start with SIGINT blocked: the main process stops them.
        with procs.spawning(), more_workers_than_cores():
            self.it: Any = iter(self.loader)

    def next(self) -> BatchReport:
        try:
            batch = next(self.it)
        except StopIteration:
            raise DsbenchError("the dataset yielded nothing in any loader worker") from None
        except DsbenchError as exc:
            raise worker_error(exc) from None
        except Exception as exc:  # the user's dataset failing in a worker, or torch
            lines = [x for x in str(exc).strip().splitlines() if x.strip()]
            raise DsbenchError(f"the dataset failed: {lines[-1] if lines else type(exc).__name__}"
                               ) from None
        report: BatchReport = batch["report"]
        return report

    def release(self, report: BatchReport) -> None:
        pass

    def close(self) -> None:
        it, self.it = self.it, None
        shutdown(it)
