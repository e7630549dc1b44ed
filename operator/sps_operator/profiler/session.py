"""The profiler's session with the server, kept across rounds: its client and context,
the record ring (cleared between rounds when the server allows it), the budget pin, and
the random prompts of each round's load."""

from __future__ import annotations

import logging
import random
import time
from typing import Any

from sps_operator.profiler.client import DsparkClient, ServerUnavailableError
from sps_operator.profiler.round_plans import RoundPlan
from sps_operator.profiler.rounds import PinNotTakenError, RoundError, StepRow, rows_from_payload
from sps_operator.profiler.server_info import INFO_RECORD_PAYLOAD_KEY, ServerContext
from sps_operator.profiler.sweep import PROFILE_SEED, RANDOM_TOKEN_HIGH_MARGIN, RANDOM_TOKEN_LOW

logger = logging.getLogger(__name__)

POLL_FAILURES_BEFORE_GIVING_UP = 5


class Session:
    """State kept across rounds: the client, the server context, ring clearing support."""

    def __init__(
        self, client: DsparkClient, context: ServerContext, vocab_size: int, temperature: float
    ) -> None:
        self.client = client
        self.context = context
        self.vocab_size = vocab_size
        self.temperature = temperature
        self.rng = random.Random(PROFILE_SEED)
        self.can_clear: bool | None = None
        self.pinned: float | None = None

    def fetch_rank_rows(self) -> list[list[StepRow]]:
        info = self.client.server_info()
        states = info.get("internal_states") if isinstance(info, dict) else None
        if not isinstance(states, list):
            raise RoundError("/server_info lost its internal_states mid-profile.")
        return [
            rows_from_payload(state.get(INFO_RECORD_PAYLOAD_KEY), rank)
            for rank, state in enumerate(states)
            if isinstance(state, dict)
        ]

    def fetch_rows_retrying(self) -> list[list[StepRow]]:
        failures = 0
        while True:
            try:
                return self.fetch_rank_rows()
            except ServerUnavailableError:
                failures += 1
                if failures >= POLL_FAILURES_BEFORE_GIVING_UP:
                    raise
                time.sleep(0.2 * failures)

    def clear_records(self) -> bool:
        """Empty the record ring so every poll ships only this round's steps."""
        if self.can_clear is False:
            return False
        ok, answer = self.client.set_internal_state({"dspark_clear_info_records": True})
        if not ok and self.can_clear is None:
            logger.warning(
                "The server does not accept dspark_clear_info_records (%s); polling the full "
                "record ring instead (slower on long runs).",
                answer,
            )
        self.can_clear = ok
        return ok

    def pin(self, frac: float) -> None:
        if self.pinned == frac:
            return
        ok, answer = self.client.set_internal_state({"dspark_force_budget_frac": frac})
        if not ok:
            raise PinNotTakenError(
                f"The server rejected dspark_force_budget_frac={frac} ({answer}). Off-diagonal "
                "profiling needs a DSpark server in compact mode that accepts the pin."
            )
        self.pinned = frac

    def reset_pin(self) -> str:
        ok, answer = self.client.set_internal_state({"dspark_force_budget_frac": None})
        if ok:
            self.pinned = None
            return "reset"
        logger.warning(
            "This server cannot reset the budget pin (it rejected dspark_force_budget_frac=null: "
            "%s); it stays pinned at frac=%s until the server restarts. Restart it before it "
            "serves traffic.",
            answer,
            self.pinned,
        )
        return "rejected"

    def load_payload(self, num_requests: int, plan: RoundPlan) -> dict[str, Any]:
        high = self.vocab_size - RANDOM_TOKEN_HIGH_MARGIN
        input_ids = [
            [self.rng.randrange(RANDOM_TOKEN_LOW, high) for _ in range(plan.rule.prompt_len)]
            for _ in range(num_requests)
        ]
        return {
            "input_ids": input_ids,
            "sampling_params": {
                "temperature": self.temperature,
                "max_new_tokens": plan.max_new_tokens,
                "ignore_eos": True,
            },
            "stream": False,
        }
