"""dsbench: measure what a dataset's on-disk format costs a training job's input pipeline."""

__version__ = "0.1.0"
