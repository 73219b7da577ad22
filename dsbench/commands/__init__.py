"""One module per `dsbench` subcommand: argument parsing and printing, no measuring logic."""
