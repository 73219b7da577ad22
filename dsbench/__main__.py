from dsbench.cli import entry

entry()
