"""dsbench: measure what a dataset's on-disk format costs a training job's input pipeline.

The flow, one package per stage; a stage imports only from the stages before it (and from the
foundation modules at this level: errors, fmt, atomic, stats, procs), as tests/test_layout.py
checks:

    storage -> adapters -> export -> results -> loader -> model -> analysis -> report -> commands

* storage:  where the bytes are: local paths or object stores, every request counted.
* adapters: read an export, whoever wrote it, wherever it is (one module per layout).
* export:   definitions, deterministic synthesis, and writing an export (generate).
* results:  the documents (bench result, survey), their schema, the machine block.
* loader:   the pipeline in worker processes and the runner that measures it.
* model:    the cluster model: loader costs, storage profiles, node rates, the simulation.
* analysis: compare and gate two results.
* report:   everything people read: text reports, the demo's verdict, plots, HTML.
* commands: one module per subcommand: parse, call, print.
"""

__version__ = "0.1.0"
