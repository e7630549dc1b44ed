"""`sps-operator crd`: print the SpsProfile CRD, the chart's CRD template or the API docs.

It sits apart from `api/crd.py` because it needs `api/docs.py`, which reads crd.py's
names (short names, printer columns): in crd.py, the two modules imported each other.
"""

from __future__ import annotations

import argparse
import sys

from sps_operator.api.crd import render_crd, render_crd_template
from sps_operator.api.docs import render_api_docs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sps-operator crd", description="Print the SpsProfile CRD (YAML) or the API docs."
    )
    parser.add_argument(
        "--docs", action="store_true", help="print the API reference (Markdown) instead"
    )
    parser.add_argument(
        "--helm", action="store_true", help="print the Helm chart's CRD template instead"
    )
    args = parser.parse_args(argv)
    if args.helm:
        sys.stdout.write(render_crd_template())
    elif args.docs:
        sys.stdout.write(render_api_docs())
    else:
        sys.stdout.write(render_crd())
    return 0


if __name__ == "__main__":
    sys.exit(main())
