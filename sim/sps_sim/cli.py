"""`sps-sim`: run the simulated DSpark server, or write its ground truth.

sps-sim [launch_server flags…]                 serve (same command line as SGLang)
sps-sim serve [launch_server flags…]           the same
sps-sim truth --preset P [--out F] [...]       true step time over a (bs, M) grid
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from sps_sim.settings import ConfigError, SimSettings, build_settings

log = logging.getLogger("sps_sim")


def prepare(argv: Sequence[str]) -> SimSettings:
    """Settings from argv + environment, with the ignored flags and warnings reported once."""
    settings = build_settings(argv, os.environ)
    if settings.ignored_args:
        log.warning(
            "sps-sim: ignoring flags it does not model: %s", " ".join(settings.ignored_args)
        )
    for warning in settings.warnings:
        log.warning("sps-sim: %s", warning)
    for notice in settings.notices:
        log.info("%s", notice)
    info = settings.table_info
    if info is not None and info["loaded"]:
        log.info(
            "sps-sim: SPS table from %s (%s, %s, sha256=%s)",
            info["path"] if info["source"] == "path" else info["source"],
            info["kind"],
            settings.sglang_flavor,
            info["sha256"],
        )
    return settings


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args[:1] == ["truth"]:
        from sps_sim.truth import main as truth_main

        return truth_main(args[1:])
    if args[:1] == ["serve"]:
        args = args[1:]
    try:
        settings = prepare(args)
    except ConfigError as exc:
        print(f"sps-sim: error: {exc}", file=sys.stderr)
        return 2
    from sps_sim.group import GroupError
    from sps_sim.http_server import serve_forever, serve_group

    try:
        asyncio.run(serve_group(settings) if settings.group else serve_forever(settings))
    except KeyboardInterrupt:
        return 0
    except GroupError as exc:
        rank = settings.group.node_rank if settings.group else 0
        print(f"sps-sim: error: node rank {rank}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"sps-sim: error: cannot serve on {settings.host}:{settings.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
