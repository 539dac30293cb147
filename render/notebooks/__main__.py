"""``python -m memderive.notebooks [MODEL ...]``: regenerate and execute the bundled notebooks."""

import sys

from memderive.notebooks.bundled import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
