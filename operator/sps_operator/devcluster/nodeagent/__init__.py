"""The test node agent: a kubelet stand-in that runs pods of simulated GPU nodes locally.

`sps-operator node-agent ...` runs `main`; tests and `dev-cluster up` use `NodeAgent`.
See docs/node-agent.md.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from .config import AgentConfig, ConfigError, NodeSpec, build_parser, parse_node_spec
from .images import ImageMapError
from .logs import container_log_files, format_pod_logs, read_container_log

__all__ = [
    "AgentConfig",
    "ConfigError",
    "NodeAgent",
    "NodeSpec",
    "container_log_files",
    "format_pod_logs",
    "main",
    "parse_node_spec",
    "read_container_log",
]


def __getattr__(name: str) -> object:
    if name == "NodeAgent":  # imported lazily: it pulls in the kubernetes client
        from .agent import NodeAgent

        return NodeAgent
    raise AttributeError(name)


def main(argv: list[str]) -> int:
    """Run the agent until SIGTERM/SIGINT; 2 on bad flags, 1 when it cannot start."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        logging.getLogger("urllib3").setLevel(logging.ERROR)
        logging.getLogger("kubernetes").setLevel(logging.WARNING)
    try:
        cfg = AgentConfig.from_args(args)
        from .agent import NodeAgent

        agent = NodeAgent(cfg)
    except (ConfigError, ImageMapError) as exc:
        print(f"sps-operator node-agent: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.start()
    except Exception as exc:
        logging.getLogger(__name__).debug("start-up failed", exc_info=True)
        print(f"sps-operator node-agent: cannot start: {exc!r}", file=sys.stderr)
        return 1
    try:
        while not stop.wait(1.0):
            pass
    finally:
        agent.stop()
    return 0
