"""`python -m bench [NAME [options]]`: one benchmark with its options, or all with defaults,
then issue 16's goals against that run's figures (`bench.goals`)."""

from __future__ import annotations

import sys
import time

from bench import BENCHMARKS, goals, run


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: python -m bench [NAME [options...]]   (no NAME: run them all)\n")
        for name, (_, about) in BENCHMARKS.items():
            print(f"  {name:10s} {about}")
        print(
            "  goals      issue 16's goals from the results the last runs left (measures nothing)"
        )
        print("\n`python -m bench NAME --help` shows a benchmark's options.")
        return 0
    if not argv:
        status = 0
        start = time.time()
        for name in BENCHMARKS:
            print(f"== {name}", flush=True)
            status |= run(name)
        print("== goals\n" + "\n".join(goals.render(goals.goals(since=start))))
        return status
    if argv[0] == "goals":
        return goals.main(argv[1:])
    name, rest = argv[0], argv[1:]
    if name not in BENCHMARKS:
        print(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    return run(name, rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
