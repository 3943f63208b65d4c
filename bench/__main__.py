"""`python -m bench [NAME [options]]`: one benchmark with its options, or all with defaults."""

from __future__ import annotations

import sys

from bench import BENCHMARKS, run


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: python -m bench [NAME [options...]]   (no NAME: run them all)\n")
        for name, (_, about) in BENCHMARKS.items():
            print(f"  {name:10s} {about}")
        print("\n`python -m bench NAME --help` shows a benchmark's options.")
        return 0
    if not argv:
        status = 0
        for name in BENCHMARKS:
            print(f"== {name}", flush=True)
            status |= run(name)
        return status
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    return run(name, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
