"""The SPS table a simulated server loads at start-up, checked with SGLang's loader rules.

The project's table library (``sps_operator.tables.formats``) owns the formats and the
loader; this module only adapts a loaded table to what the simulated planner reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sps_operator.api.hashing import content_hash
from sps_operator.tables.formats import (
    SpsAdditiveCostTable,
    SpsCostTable,
    is_uninitialized_sps_table,
    load_sps_table_text,
)


@dataclass(frozen=True)
class LoadedTable:
    """A loaded table plus whether SGLang treats it as uninitialized (flat)."""

    table: SpsCostTable | SpsAdditiveCostTable
    uninitialized: bool
    sha256: str = ""  # of the file text, like the operator's table hash (first 16 hex digits)

    @property
    def kind(self) -> str:
        return "additive" if isinstance(self.table, SpsAdditiveCostTable) else "diagonal"

    def diagonal_lookup(self, batch_tokens: int) -> float:
        assert isinstance(self.table, SpsCostTable)
        return self.table.lookup(batch_tokens)

    def additive_step_time(self, num_reqs: int, budget: int) -> float:
        assert isinstance(self.table, SpsAdditiveCostTable)
        return self.table.step_time(num_reqs=num_reqs, budget=budget)


def load_table_text(text: str, *, diagonal_only: bool = False) -> LoadedTable:
    """Decode like ``load_sps_table_from_path``; ValueError carries the loader's message.

    ``diagonal_only``: the loader of builds that know only the diagonal format.
    """
    table = load_sps_table_text(text, diagonal_only=diagonal_only)
    return LoadedTable(
        table=table,
        uninitialized=is_uninitialized_sps_table(table),
        sha256=content_hash(text),
    )


def built_table(table: SpsCostTable | SpsAdditiveCostTable) -> LoadedTable:
    """A table the server built itself (no file): hashed over its compact JSON."""
    return LoadedTable(
        table=table,
        uninitialized=is_uninitialized_sps_table(table),
        sha256=content_hash(table.to_json()),
    )


def load_table_file(path: str, *, diagonal_only: bool = False) -> LoadedTable:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"[Errno {exc.errno}] {exc.strerror}: {path!r}") from exc
    return load_table_text(text, diagonal_only=diagonal_only)
