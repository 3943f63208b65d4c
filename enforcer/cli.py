"""`resource-enforcer`: run the relay or the NRI plugin, show its state, plan placements, check a
configuration."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from enforcer.build import version
from enforcer.logs import FORMATS, setup_logging
from enforcer.options import DEFAULT_METRICS_ADDRESS, RunOptions


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="serve the CRI relay in front of the runtime")
    d = RunOptions()
    p.add_argument("--runtime-socket", default=d.runtime_socket, metavar="PATH")
    p.add_argument(
        "--image-socket", default=None, metavar="PATH", help="default: the runtime socket"
    )
    p.add_argument("--relay-socket", default=d.relay_socket, metavar="PATH")
    _add_engine_options(p)
    p.add_argument(
        "--fallback-link",
        action="store_true",
        help="while no enforcer runs, leave the relay socket path linked to the runtime socket",
    )
    p.add_argument(
        "--supervise",
        action="store_true",
        help="run the relay in a child process and start it again if it dies",
    )


def _plugin_index(text: str) -> str:
    if len(text) != 2 or not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a two-digit index (00-99)")
    return text


def _plugin_name(text: str) -> str:
    if not text or len(text) > 63 or not all(c.isalnum() or c in "-_." for c in text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: a plugin name is 1-63 letters, digits, '-', '_' or '.'"
        )
    return text


def _add_nri(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "nri", help="serve the same engine as an NRI plugin of the runtime (containerd, CRI-O)"
    )
    d = RunOptions()
    p.add_argument("--nri-socket", default=d.nri_socket, metavar="PATH")
    p.add_argument("--plugin-name", default=d.plugin_name, type=_plugin_name, metavar="NAME")
    p.add_argument(
        "--plugin-index",
        default=d.plugin_index,
        type=_plugin_index,
        metavar="NN",
        help="two digits: the runtime calls plugins in ascending order (default: %(default)s)",
    )
    _add_engine_options(p)


def _add_engine_options(p: argparse.ArgumentParser) -> None:
    """The options both `run` and `nri` take."""
    d = RunOptions()
    p.add_argument("--state-dir", default=d.state_dir, metavar="DIR")
    p.add_argument("--config", default=None, metavar="FILE", help="default: policy none")
    p.add_argument("--sysfs-root", default=d.sysfs_root, metavar="DIR")
    p.add_argument("--cgroupfs-root", default=d.cgroupfs_root, metavar="DIR")
    p.add_argument("--resctrl-root", default=d.resctrl_root, metavar="DIR")
    p.add_argument(
        "--metrics-address",
        default=None,
        metavar="HOST:PORT",
        help=f"empty: no metrics endpoint (default: the configuration's metrics.address, "
        f"else {DEFAULT_METRICS_ADDRESS})",
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument(
        "--grace-period",
        default=d.grace_period,
        type=_seconds,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long calls in flight may take to finish "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=FORMATS,
        help="json: one object per line, the webhook's field names (default: %(default)s)",
    )
    cluster = p.add_argument_group(
        "configuration from the cluster",
        "ConfigMaps resource-enforcer-config.node.<node>, .group.<group>, .default "
        "(see docs/enforcer.md)",
    )
    cluster.add_argument(
        "--cluster-config",
        default=d.cluster_config,
        choices=["auto", "on", "off"],
        help="auto: on when a node name and API credentials are at hand (default: %(default)s)",
    )
    cluster.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or None,
        metavar="NAME",
        help="this node's name (default: $NODE_NAME)",
    )
    cluster.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE") or d.namespace,
        metavar="NS",
        help="the ConfigMaps' namespace (default: $POD_NAMESPACE, else %(default)s)",
    )
    cluster.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="API server credentials (default: the pod's service account)",
    )
    p.add_argument(
        "--kubelet-dir",
        default=d.kubelet_dir,
        metavar="DIR",
        help="kubelet's --root-dir: the enforcer does not start when its cpu_manager_state "
        "names a CPU manager policy other than none; the DRA driver's sockets go to "
        "DIR/plugins_registry/ and DIR/plugins/cpu.resource-enforcer.dev/ (default: %(default)s)",
    )
    p.add_argument(
        "--cdi-dir",
        default=d.cdi_dir,
        metavar="DIR",
        help="the DRA driver (dra.enabled): where the runtime reads CDI specs "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--health-file",
        default=None,
        metavar="PATH",
        help='a file rewritten every few seconds: "serving" when in charge, else "standby"',
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more seconds")
    return value


def _add_status(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show the allocations of a running or stopped enforcer")
    p.add_argument("--state-dir", default=RunOptions().state_dir, metavar="DIR")
    p.add_argument("--output", default="table", choices=["table", "json"])


def _add_plan(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="place pods with the configured policy, without a node")
    p.add_argument("--config", required=True, metavar="FILE")
    p.add_argument("--sysfs-root", required=True, metavar="DIR")
    p.add_argument(
        "--pods",
        required=True,
        metavar="FILE",
        help="Pods, Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs "
        "(multi-document YAML or a kind: List)",
    )
    p.add_argument("--format", default="json", choices=["json", "table"])
    p.add_argument(
        "--devices",
        default=None,
        metavar="FILE",
        help="namespace/pod/container -> {devices: [...], numaNodes: [...]}: the devices "
        "kubelet would report, for policy.preferCloseToDevices",
    )


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check-config", help="validate a configuration file")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--sysfs-root", default=None, metavar="DIR")
    p.add_argument("--resctrl-root", default=None, metavar="DIR")
    p.add_argument("--cgroupfs-root", default=None, metavar="DIR")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="resource-enforcer",
        description="Hardware-aware CPU, memory, RDT and block-I/O control for Kubernetes "
        "containers, as a CRI relay between kubelet and the runtime or as an NRI plugin of the "
        "runtime.",
    )
    top.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = top.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_nri, _add_status, _add_plan, _add_check):
        add(sub)
    return top


def _engine_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "state_dir": args.state_dir,
        "config": args.config,
        "sysfs_root": args.sysfs_root,
        "cgroupfs_root": args.cgroupfs_root,
        "resctrl_root": args.resctrl_root,
        "metrics_address": args.metrics_address,
        "cluster_config": args.cluster_config,
        "node_name": args.node_name,
        "namespace": args.namespace,
        "kubeconfig": args.kubeconfig,
        "health_file": args.health_file,
        "grace_period": args.grace_period,
        "kubelet_dir": args.kubelet_dir,
        "cdi_dir": args.cdi_dir,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # Each command imports only what it needs, here: `--help`, `status` and `check-config`
    # do not pay for the daemon's (grpc, protobuf, prometheus_client: ~0.5 s).
    if args.command == "run" and args.supervise:
        from enforcer.supervisor import child_command, supervise

        setup_logging(args.log_level, args.log_format)
        return supervise(child_command(sys.argv[1:] if argv is None else argv))
    if args.command == "nri":
        setup_logging(args.log_level, args.log_format)
        from enforcer.app.daemon import on_uvloop
        from enforcer.app.nri import serve_nri

        return on_uvloop(
            serve_nri(
                RunOptions(
                    nri_socket=args.nri_socket,
                    plugin_name=args.plugin_name,
                    plugin_index=args.plugin_index,
                    **_engine_options(args),
                )
            )
        )
    if args.command == "run":
        setup_logging(args.log_level, args.log_format)
        options = RunOptions(
            runtime_socket=args.runtime_socket,
            image_socket=args.image_socket,
            relay_socket=args.relay_socket,
            fallback_link=args.fallback_link,
            **_engine_options(args),
        )
        # Only `run` pays for the daemon's imports (grpc, protobuf, prometheus_client: ~0.5 s).
        from enforcer.app.run import serve

        return serve(options)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s: %(message)s")
    if args.command == "status":
        from enforcer.commands.status import status

        return status(args.state_dir, args.output)
    if args.command == "plan":
        from enforcer.commands.plan import plan_command

        return plan_command(args.config, args.sysfs_root, args.pods, args.format, args.devices)
    from enforcer.commands.check_config import check_config

    return check_config(
        args.file,
        sysfs_root=args.sysfs_root,
        resctrl_root=args.resctrl_root,
        cgroupfs_root=args.cgroupfs_root,
    )


if __name__ == "__main__":
    sys.exit(main())
