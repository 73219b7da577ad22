"""The loader benchmark: a training job's input pipeline in worker processes, measured.

In: an export path and BenchOptions (options.py). Out: a bench result document
(runner.run_bench). pipeline.py is the per-sample work, worker.py one worker process,
sources.py and torch_source.py the main process's side of dsbench's own loader and of torch's
DataLoader. May import: the foundation modules, adapters, results.
"""
