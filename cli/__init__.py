"""The command-line programs. Installed as ``nmt_toolkit.cli``; each module is one thin program."""
