"""Notebooks: one per bundled model (``bundled.py``; ``python -m memderive.notebooks [MODEL ...]``) and the tour
(``tour.py``, from ``notebooks/tour.md``; ``python -m memderive.notebooks.tour``)."""
