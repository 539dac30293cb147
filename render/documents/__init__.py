"""Documents: the text, Markdown and LaTeX writeups of estimates and checks (``writeup.py`` with its Jinja
``templates/``, ``steps.py`` the derivation's steps, ``latex.py``, ``text.py``, ``check_report.py``) and the
units they print numbers in (``units.py``)."""
