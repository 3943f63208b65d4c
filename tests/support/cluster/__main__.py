"""`python -m tests.support.cluster up|down|demo|restart-kubelet` (the Makefile's cluster-*)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.support.cluster.bed import Cluster, say
from tests.support.cluster.layout import RUNTIMES
from tests.support.cluster.procs import ClusterError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.cluster")
    parser.add_argument("command", choices=["up", "down", "demo", "restart-kubelet"])
    parser.add_argument("--mode", default="nri", help="nri (default) or relay")
    parser.add_argument(
        "--runtime", default="containerd", choices=RUNTIMES, help="containerd (default) or crio"
    )
    parser.add_argument("--dir", type=Path, default=None, help="the cluster folder (.cluster)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            cluster = Cluster(args.mode, args.dir, runtime=args.runtime)
            cluster.up()
            say(
                f"up ({args.mode}, {args.runtime}): export KUBECONFIG={cluster.lay.kubeconfig}; "
                f"kubectl: {cluster.lay.kubectl}"
            )
        elif args.command == "down":
            problems = (
                Cluster.attach(args.dir).down()
                if _recorded(args.dir)
                else Cluster(args.mode, args.dir, runtime=args.runtime).down()
            )
            return 1 if problems else 0
        elif args.command == "restart-kubelet":
            Cluster.attach(args.dir).restart_kubelet()
        else:
            from tests.support.cluster.demo import demo

            return demo(args.mode, args.dir, args.runtime)
    except ClusterError as e:
        say(str(e))
        return 1
    return 0


def _recorded(root: Path | None) -> bool:
    from tests.support.cluster.layout import Layout, default_folder

    return (Layout(root or default_folder()).run / "cluster.json").exists()


if __name__ == "__main__":
    sys.exit(main())
