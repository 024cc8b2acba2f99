"""Run one ClickHouse HTTP front (one simulated replica) in the foreground.

``python -m tests.support.chfront --host 127.0.0.1 --port 18123 --data-dir DIR
[--user U --password P] [--display-name NAME] [--port-file FILE]
[--tls-cert CERT --tls-key KEY [--tls-client-ca CA]]``

With ``--tls-cert`` the front speaks HTTPS only; ``--tls-client-ca`` also requires a
client certificate signed by that CA (mutual TLS).

``--port 0`` picks a free port; ``--port-file`` receives the port once the server answers.
SIGTERM or SIGINT stops the server (exit 0); SIGUSR1 recovers from any injected fault,
which is the only way to end a ``refuse`` fault early, since the port is closed then.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
from types import FrameType

logger = logging.getLogger("tests.support.chfront")


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.chfront",
        description="ClickHouse HTTP interface over chDB, with fault injection (test server)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=18123, help="port (0 picks a free one)")
    parser.add_argument("--data-dir", required=True, help="chDB data directory of this replica")
    parser.add_argument("--user", default="default", help="the one accepted user")
    parser.add_argument("--password", default="", help="that user's password")
    parser.add_argument("--display-name", default=None, help="X-ClickHouse-Server-Display-Name")
    parser.add_argument("--port-file", default=None, help="write the listening port here")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.add_argument("--tls-cert", default=None, help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", default=None, help="the private key of --tls-cert")
    parser.add_argument(
        "--tls-client-ca", default=None, help="require client certificates signed by this CA"
    )
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be within 0..65535, got {args.port}")
    return args


def _tls_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    if args.tls_cert is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    if args.tls_client_ca is not None:
        context.load_verify_locations(args.tls_client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    from ._server import FrontServer  # loads chDB: only once the arguments are known good

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s chfront[%(process)d] %(name)s: %(message)s",
    )
    os.makedirs(args.data_dir, exist_ok=True)
    front = FrontServer(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        user=args.user,
        password=args.password,
        display_name=args.display_name,
        tls=_tls_context(args),
    )
    stop = threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %d: stopping", signum)
        stop.set()

    def on_recover(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=front.recover, name="chfront-recover", daemon=True).start()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGUSR1, on_recover)
    try:
        front.start()
    except OSError as exc:
        logger.error("cannot listen on http://%s:%d: %s", args.host, args.port, exc)
        front.stop()
        return 1
    except Exception:
        logger.exception("cannot open the chDB data directory %s", args.data_dir)
        return 1
    if args.port_file:
        tmp = f"{args.port_file}.tmp"
        with open(tmp, "w", encoding="ascii") as handle:
            handle.write(f"{front.port}\n")
        os.replace(tmp, args.port_file)
    while not stop.wait(0.5):
        pass
    front.stop()
    logger.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
