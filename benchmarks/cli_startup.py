"""Time cold CLI runs (fresh interpreter each time): python benchmarks/cli_startup.py [N]."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

COMMANDS = [
    ["estimate", "--model", "llama-2-7b"],
    ["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096", "--tp", "8", "--sp",
     "--recompute", "selective", "--json"],
]


def main(repeats: int = 5) -> None:
    for cmd in COMMANDS:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "memderive.commands.cli", *cmd], check=True, capture_output=True)
            times.append(time.perf_counter() - start)
        print(f"{' '.join(cmd)}: median {statistics.median(times):.3f} s, min {min(times):.3f} s over {repeats}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
