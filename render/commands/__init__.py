"""The command line: ``cli.py`` dispatches, and each command is one module named as the command
(``estimate.py`` is ``memderive estimate``: its options and where its output is printed)."""
