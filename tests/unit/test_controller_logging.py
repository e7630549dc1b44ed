"""The operator's logs at the default level: its own lines, not one per watch event."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from sps_operator.controller.main import configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    ours = logging.getLogger("sps_operator").level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("sps_operator").setLevel(ours)


def test_default_level_drops_kopfs_per_event_lines_and_keeps_ours(restore_logging: None) -> None:
    configure_logging(debug=False, verbose=False, log_format="plain")
    assert not logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)
    assert logging.getLogger("kopf.objects").isEnabledFor(logging.WARNING)
    assert logging.getLogger("sps_operator.controller.reconcile").isEnabledFor(logging.INFO)


def test_verbose_shows_kopfs_handler_lines(restore_logging: None) -> None:
    configure_logging(debug=False, verbose=True, log_format="plain")
    assert logging.getLogger("kopf.objects").isEnabledFor(logging.INFO)
