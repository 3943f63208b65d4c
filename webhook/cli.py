"""`resource-webhook serve` and `resource-webhook certs` (see docs/webhook.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from webhook.build import version
from webhook.cache import DEFAULT_CACHE_BYTES
from webhook.logs import FORMATS, LEVELS, setup_logging


def _byte_size(text: str) -> int:
    """A size in bytes, as a Kubernetes quantity: `33554432`, `32Mi`, `0` (no cache)."""
    from resource_contract.quantities import parse_quantity

    try:
        value = parse_quantity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="resource-webhook",
        description="Mutating admission webhook of kube-resource-enforcer.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve AdmissionReviews over HTTPS")
    serve.add_argument("--tls-cert", required=True, metavar="FILE", help="serving certificate")
    serve.add_argument("--tls-key", required=True, metavar="FILE", help="its private key")
    serve.add_argument("--host", default="0.0.0.0", help="address to listen on (0.0.0.0)")
    serve.add_argument("--port", type=int, default=8443, help="port (8443; 0 picks a free one)")
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="the enforcer's configuration, to check class names, classAccess and preferenceAccess",
    )
    serve.add_argument(
        "--cache-bytes",
        type=_byte_size,
        default=DEFAULT_CACHE_BYTES,
        metavar="SIZE",
        help="memory for memoized annotations and patches, in bytes or as a quantity "
        "(32Mi; 0: none)",
    )
    serve.add_argument("--log-level", default="info", choices=LEVELS)
    serve.add_argument(
        "--log-format",
        default="json",
        choices=FORMATS,
        help="json: one object per line, the enforcer's field names (default: %(default)s)",
    )

    certs = sub.add_parser("certs", help="write a CA and a serving certificate for the Service")
    certs.add_argument("--service", required=True, metavar="NAME")
    certs.add_argument("--namespace", required=True, metavar="NS")
    certs.add_argument("--out", required=True, metavar="DIR")
    certs.add_argument(
        "--secret-name", default="resource-webhook-tls", help="name of the Secret written"
    )
    certs.add_argument("--days", type=int, default=365, help="serving certificate lifetime")
    certs.add_argument(
        "--new-ca", action="store_true", help="make a new CA even if DIR already holds one"
    )
    return parser


def _serve(args: argparse.Namespace) -> int:
    setup_logging(args.log_level, fmt=args.log_format)
    log = logging.getLogger("webhook")
    # Everything that can be wrong with the inputs is checked before the port is opened.
    config = None
    if args.config:
        # Imported here, as the server stack below: `certs` and `--help` stay fast.
        from resource_contract.config import ConfigError
        from resource_files.config_file import load_config

        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(f"resource-webhook: configuration {args.config} refused:", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
    import ssl

    from webhook.app import create_app
    from webhook.metrics import Metrics
    from webhook.server import bind, run
    from webhook.tls import ReloadingTLS

    metrics = Metrics()
    try:
        tls = ReloadingTLS(
            args.tls_cert, args.tls_key, on_reload=lambda e: metrics.certificate_reloaded(e.ok)
        )
    except (OSError, ssl.SSLError, ValueError) as exc:
        print(
            f"resource-webhook: cannot load {args.tls_cert} / {args.tls_key}: {exc}",
            file=sys.stderr,
        )
        return 1
    app = create_app(config, metrics=metrics, cache_bytes=args.cache_bytes)
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        print(f"resource-webhook: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    log.info(
        "starting",
        extra={
            "fields": {
                "config": args.config,
                "cache_bytes": args.cache_bytes,
                "rdt_classes": sorted(config.configured_classes("rdt")) if config else None,
                "blockio_classes": sorted(config.configured_classes("blockio")) if config else None,
                "preference_access": dict(config.preference_access().rules) if config else None,
            }
        },
    )
    run(app, sock, tls, log_level=args.log_level)
    return 0


def _certs(args: argparse.Namespace) -> int:
    from webhook.certs import write_certs

    try:
        files = write_certs(
            args.service,
            args.namespace,
            args.out,
            secret_name=args.secret_name,
            days=args.days,
            new_ca=args.new_ca,
        )
    except (OSError, ValueError) as exc:
        print(f"resource-webhook: {exc}", file=sys.stderr)
        return 1
    ca = "reused the CA in" if files.reused_ca else "new CA in"
    print(f"{ca} {files.ca_crt.parent}:")
    for path in (
        files.ca_crt,
        files.ca_key,
        files.tls_crt,
        files.tls_key,
        files.secret,
        files.ca_bundle,
    ):
        print(f"  {path}")
    print(f"apply the Secret:  kubectl apply -f {files.secret}")
    print(f"caBundle:          {files.ca_bundle} (see docs/webhook.md)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _certs(args)


if __name__ == "__main__":
    sys.exit(main())
