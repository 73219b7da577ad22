"""The measured job: a synchronous data-parallel job on torch.distributed, and the model beside it.

Every rank runs a real loader (dsbench's or torch's DataLoader) over its own share of an export,
spends the stated compute time per step and joins an all-reduce; rank 0 gathers what every rank
measured per step and adds the cluster model's prediction for the same configuration.

In: an export path and JobOptions (options.py); the rank's identity from torch's launcher or
Slurm (identity.py). Out: a job result document (result.py, kind `dsbench-job`), written by
rank 0. launch.py starts the ranks on one machine through torch's elastic launcher; rank.py is
what each rank runs and must not import torch at its top level (spawned loader workers import
it again). May import: the foundation modules, adapters, results, loader and model.
"""
