"""The one content hash of the project: sha256, hex, truncated.

Tables are named and compared by `content_hash` of their JSON text; derived object names
use `digest` of their inputs. Both sides of every comparison (operator, simulator,
plugin) import these, so a hash computed in one place matches the other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

CONTENT_HASH_LENGTH = 16


def content_hash(text: str, length: int = CONTENT_HASH_LENGTH) -> str:
    """sha256 of `text` (UTF-8), first `length` hex digits."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def digest(*parts: Any, length: int = 10) -> str:
    """A short stable hash of JSON-serialisable inputs (for derived names)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return content_hash(text, length)
