"""``python -m memderive``: the same command line as the ``memderive`` script."""

from memderive.commands.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
