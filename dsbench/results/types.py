"""The bench result document as types, for the code that builds and reads it.

(No `from __future__ import annotations` here: TypedDict must see NotRequired at run time.)

They mirror schemas/bench.schema.json key for key (tests/test_schemas.py checks both ways); the
schema is what a file is checked against, these are what mypy checks the code against.
"""


from typing import Any, NotRequired, TypedDict


class Machine(TypedDict):
    hostname: NotRequired[str]
    cpu_model: str
    logical_cores: NotRequired[int]
    usable_cores: int
    memory_bytes: NotRequired[int]
    platform: NotRequired[str]
    python: NotRequired[dict[str, Any]]
    libraries: NotRequired[dict[str, str | None]]
    load_avg_1m: NotRequired[float]
    git: NotRequired[dict[str, Any] | None]


class Counts(TypedDict):
    method: str
    exact: bool
    units: NotRequired[int]
    units_read: NotRequired[int]
    samples: NotRequired[int]
    skipped_samples: NotRequired[int]
    files: NotRequired[int]
    bytes: NotRequired[int]
    mapped_bytes: NotRequired[int]
    files_per_sample: float
    bytes_per_sample: float
    mapped_bytes_per_sample: NotRequired[float]


class Config(TypedDict):
    path: str
    workers: NotRequired[list[int]]
    batch_size: int
    seconds: float
    rounds: int
    sweep_rounds: NotRequired[int | None]
    warmup_batches: int
    step_time_s: float
    cold: bool
    decoder: str
    normalize: bool
    on_error: str
    backend: str
    prefetch: int
    seed: NotRequired[int]
    batches: NotRequired[int | None]
    transform: NotRequired[str]
    count_samples: NotRequired[int]
    layout: NotRequired[str | None]
    image_field: NotRequired[str | None]
    pipeline: NotRequired[str | None]
    dataset: NotRequired[str | None]
    stall_s: NotRequired[float | None]
    max_pixels: NotRequired[int]
    order: NotRequired[str]  # absent before orders existed: sequential
    shuffle_buffer: NotRequired[int | None]
    block: NotRequired[int | None]
    ceiling: NotRequired[bool]
    epochs: NotRequired[int | None]
    inflight: NotRequired[int]
    exact_samples: NotRequired[int]
    seq_len: NotRequired[int | None]
    pack: NotRequired[bool]
    clip_seconds: NotRequired[float | None]
    sample_rate: NotRequired[int | None]
    tokenizer: NotRequired[dict[str, Any] | None]


class Statistics(TypedDict):
    center: str
    interval: str
    level: float


class Round(TypedDict):
    samples: int
    batches: NotRequired[int]
    wall_s: float
    cpu_s: float
    main_cpu_s: NotRequired[float]
    workers_cpu_s: NotRequired[float]
    workers_cpu_s_reaped: NotRequired[float]
    samples_per_s: float
    cpu_s_per_sample: float
    host_cpu_s: NotRequired[float]
    host_cpu_s_per_sample: NotRequired[float]
    accelerator_util: NotRequired[float | None]
    warmup_batches: NotRequired[int]
    warmup_s: NotRequired[float]
    peak_pss_bytes: NotRequired[float]
    peak_pss_anon_bytes: NotRequired[float]
    peak_pss_file_bytes: NotRequired[float]
    peak_pss_shmem_bytes: NotRequired[float]
    window_files: NotRequired[int]
    window_bytes: NotRequired[int]
    stages: NotRequired[dict[str, float]]
    epochs: NotRequired[list[dict[str, Any]]]  # --epochs: each epoch of the round
    worker_samples: NotRequired[list[int]]  # samples each loader worker delivered
    idle_workers: NotRequired[list[int]]  # the workers that delivered none


class OrderFigures(TypedDict):
    batches: int
    units_per_batch: float | None  # None where a format's own library does not say
    label_entropy_bits: float | None
    label_entropy_all_bits: float | None
    source_distance: float | None


class Ceiling(TypedDict):
    samples_per_s: float
    fraction: float
    fraction_ci95: list[float] | None


class Run(TypedDict):
    workers: int
    batch_size: int
    samples_per_s: float
    samples_per_s_iqr: list[float]
    samples_per_s_ci95: list[float]
    samples_per_s_spread: float
    cpu_s_per_sample: float
    cpu_s_per_sample_iqr: list[float]
    cpu_s_per_sample_ci95: list[float]
    cpu_s_per_sample_spread: float
    host_cpu_s_per_sample: NotRequired[float]
    stages: dict[str, float]
    bytes_per_sample: float
    mapped_bytes_per_sample: float
    files_per_sample: float
    requests_per_sample: NotRequired[float]
    order_figures: NotRequired[OrderFigures]
    ceiling: NotRequired[Ceiling]
    peak_pss_bytes: float
    peak_pss_anon_bytes: NotRequired[float]
    peak_pss_file_bytes: NotRequired[float]
    peak_pss_shmem_bytes: NotRequired[float]
    samples: int
    skipped_samples: int
    skipped: list[dict[str, Any]]
    accelerator_util: float | None
    scaling_efficiency: float | None
    batch_cpu_s: list[float]
    rounds: list[Round]
    epochs: NotRequired[list[dict[str, Any]]]  # --epochs: per epoch, over the rounds
    # Samples each loader worker delivered in the windows (summed over the rounds), the workers
    # that delivered none, and each worker's samples in an epoch where dsbench splits the export
    # (None where counting it would read the units again; absent for a format's own reader).
    worker_samples: NotRequired[list[int]]
    idle_workers: NotRequired[list[int]]
    worker_shares: NotRequired[list[int] | None]


class FirstByte(TypedDict):
    p50: float
    p99: float


class Requests(TypedDict):
    """An export in an object store: its requests, counted with the files and bytes."""

    client: str
    client_version: str
    method: str
    requests_per_sample: float
    get_per_sample: float
    range_get_per_sample: float
    head_per_sample: float
    list_per_sample: float
    requests: dict[str, int]
    body_bytes_per_sample: float
    retries_per_sample: NotRequired[float]
    throttled_per_sample: NotRequired[float]
    retry_s_per_sample: NotRequired[float]
    failed_requests: NotRequired[int]
    retry_policy: NotRequired[dict[str, float]]
    first_byte_s: NotRequired[FirstByte]
    client_cpu_s_per_request: NotRequired[float]


class Exact(TypedDict):
    """Exact CPU per sample (loader/exact.py): instructions by stage, the kernel's counts."""

    counted: bool
    why_not: str | None
    counter: NotRequired[dict[str, str]]
    samples: NotRequired[int]
    read_samples: NotRequired[int]
    units_read: NotRequired[int]
    whole_units: NotRequired[bool]
    instructions_per_sample: NotRequired[float]
    stages: NotRequired[dict[str, float]]
    read_calls_per_sample: NotRequired[float]
    write_calls_per_sample: NotRequired[float]
    minor_faults_per_sample: NotRequired[float]
    kernel_stages: NotRequired[dict[str, dict[str, float]]]
    wall_s: NotRequired[float]
    ids_per_sample: NotRequired[float]
    read_ids_per_sample: NotRequired[float]


class BenchResult(TypedDict):
    schema_version: int
    kind: str
    created_utc: str
    dsbench_version: str
    run_id: NotRequired[str | None]
    machine: Machine
    export: dict[str, Any]  # the export summary: schemas/summary.schema.json
    counts: Counts
    config: Config
    statistics: Statistics
    runs: list[Run]
    warnings: NotRequired[list[str]]
    requests: NotRequired[Requests]
    exact: NotRequired[Exact]
    reader: NotRequired[dict[str, str]]  # --backend native: the library, version, usage
