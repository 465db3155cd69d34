"""Differential fuzzing of page decoding, the long run (``tests/unit/pages/test_fuzz_differential.py``
is the CI-sized one): flips bits and bytes in the data pages of generated files and
counts what youmu and pyarrow make of each damaged file.

    python benches/fuzz_differential.py --flips 20000 [--seed 1]

Prints a table of (youmu outcome, pyarrow outcome) counts — ``same`` (the original
values), ``raised``, ``silent`` (other values without an error) — then each reader's
silent count, and the flips (if any) where youmu was silently wrong while pyarrow
refused the file or youmu raised an untyped error. Exits 1 in either case.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from flipfuzz import fuzz  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flips", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        report = fuzz(Path(d), args.flips, seed=args.seed)
    dt = time.perf_counter() - t0
    print(report.table())
    print(f"\nflips: {args.flips} (seed {args.seed}), {dt:.0f} s")
    print(f"youmu silent: {report.silent('youmu')}, pyarrow silent: {report.silent('pyarrow')}")
    for f in report.worse:
        print("youmu silent where pyarrow raised:", f)
    for f in report.untyped:
        print("untyped:", f)
    return 1 if report.worse or report.untyped else 0


if __name__ == "__main__":
    sys.exit(main())
