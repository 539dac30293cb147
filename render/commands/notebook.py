"""``memderive notebook``: write a Jupyter notebook that explains an estimate with the model's numbers."""

from __future__ import annotations

import argparse
import os

from memderive.arguments import add_model_options, add_options, command_line, options_from_args
from memderive.derivations.estimate import estimate
from memderive.documents.units import parse_size
from memderive.notebooks.bundled import execute, notebook, write


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("notebook", help="write a Jupyter notebook deriving a model's memory step by step")
    add_model_options(parser)
    add_options(parser, "notebook")
    parser.add_argument("--gpu-memory", default="80GiB", help="capacity line of the plots (default 80GiB)")
    parser.add_argument("--execute", action="store_true", help="run the notebook (needs nbclient and ipykernel)")
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")
    parser.add_argument("-o", "--output", required=True, help="FILE.ipynb")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.output.endswith(".ipynb"):
        raise ValueError(f"-o must name a .ipynb file, got {args.output!r}")
    if os.path.lexists(args.output) and not args.force:  # a dangling symlink too: writing would follow it
        raise ValueError(f"{args.output} exists; pass --force to overwrite it")
    parse_size(args.gpu_memory, "--gpu-memory")  # a clear error before any work
    est = estimate(args.model, options_from_args(args))  # estimate's defaults, --mode params included (issue 37)

    nb = notebook(est, args.gpu_memory, command_line(args))
    if args.execute:
        try:
            nb = execute(nb)
        except ModuleNotFoundError as exc:
            raise ValueError(f"--execute needs {exc.name}; install the test extras (pip install -e '.[test]')") from None
    write(nb, args.output, force=args.force)
    return 0
