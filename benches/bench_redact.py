"""What redacting a long message costs (every youmu error is redacted when printed):
CPU seconds of ``youmu._internal.redaction.redact`` on messages of the worst shape for its scans —
word boundaries with no ``=`` after them — and of an ordinary one, at sizes from 100 kB
to 4 MB, against a linear baseline in the same run (``text.encode()`` plus one
``str.find`` pass over the same text). A linear redaction keeps the same ratio to the
baseline at every size; a quadratic one's ratio grows with the size.

    python benches/bench_redact.py --sizes 100000 400000 1000000 4000000
"""

from __future__ import annotations

import argparse
import time

from youmu._internal.redaction import redact

SHAPES = {
    "spaces": "a ",
    "colons": "x:",
    "ampersands": "w&",
    "message": "cannot read s3://bucket/part-00017.parquet: page 4 of column 'input_ids' (worker 3, rank 7); ",
}


def cpu(fn, *args) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn(*args)
        best = min(best, time.process_time() - t0)
    return best


def baseline(text: str) -> None:
    text.encode()
    text.find("\x00")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100_000, 400_000, 1_000_000, 4_000_000])
    args = ap.parse_args()
    print(f"{'shape':<12}{'chars':>10}{'redact s':>11}{'baseline s':>12}{'ratio':>9}")
    for name, unit in SHAPES.items():
        for n in args.sizes:
            text = unit * (n // len(unit))
            r, b = cpu(redact, text), cpu(baseline, text)
            print(f"{name:<12}{len(text):>10,}{r:>11.4f}{b:>12.5f}{r / max(b, 1e-9):>9.1f}")


if __name__ == "__main__":
    main()
