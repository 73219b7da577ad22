"""The data order across a restart: `dsbench resume`.

In: an export path and ResumeOptions (measure.py). Out: a resume document (kind
`dsbench-resume`): per rank and in total, the samples a restart replays or skips against an
uninterrupted epoch of the same seed, the first step where the order differs, the restart's
time to its first batch, its fast-forward time or state size, and the label entropy and
distinct shards per batch after the restart against steady state. order.py is the epoch's
order and the state that fixes it, workers.py dsbench's own loader (worker processes, saved
state), torch_loader.py torch's DataLoader and torchdata's StatefulDataLoader, figures.py the
comparison, reshard.py an elastic restart's remainder (what the epoch still owes, dealt to
another number of ranks and workers) and elastic.py that restart (`--ranks-after`), its ranks
run together. May import: the foundation modules, storage, adapters, loader.
"""
