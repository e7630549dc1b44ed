"""Unit tests: every reason a controller pass writes is one api/reasons.py lists."""

from collections.abc import Iterator

import pytest
from fakekube import UNLISTED_REASONS


@pytest.fixture(autouse=True)
def only_listed_reasons() -> Iterator[None]:
    """Fails a test whose passes wrote a reason (a condition's, a target's, a failure's, a
    wait's, an event's) that sps_operator/api/reasons.py does not list: the static scan in
    test_api_reasons.py reads the source; this sees what the passes actually write."""
    UNLISTED_REASONS.clear()
    yield
    unlisted = sorted(set(UNLISTED_REASONS))
    UNLISTED_REASONS.clear()
    assert not unlisted, f"reasons written that api/reasons.py does not list: {unlisted}"
