"""The package's version, as pyproject.toml declares it (``tests/test_cold_path.py`` checks the two agree):
a constant, so that ``memderive --version`` and every command's start-up read no installed metadata
(``importlib.metadata`` costs more to import than an estimate's arithmetic)."""

__version__ = "0.1.0"
