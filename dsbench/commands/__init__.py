"""One module per subcommand, each with HELP, add_arguments(parser) and run(args) -> exit code;
options.py holds the options several commands share. Parse, call, print: no logic of their own.
"""
