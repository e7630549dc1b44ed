"""The result ConfigMap: the one contract between the profiler (writer) and the operator.

The operator creates an empty ConfigMap per run phase; the profiler (and only it, through
the run's ServiceAccount) patches these keys:

* `data["status"]`: `running` | `succeeded` | `failed`
* `data["message"]`: what happened / what to do
* `data["progress"]`: `"k/n"` cells done
* `data["manifest.json"]`: the manifest (a JSON object)
* `data["rounds.jsonl"]`: one line per measured round, or when large
  `binaryData["rounds.jsonl.gz"]` (gzip; the API carries binaryData base64-encoded)

The profiler runs inside the user's image, so for the operator everything here is
untrusted input: `read_result` bounds every size before it decodes (a decompression bomb
stops at `MAX_ROUNDS_BYTES`), parses JSON only through `parse_json` (deep nesting and
Python's int-string limit become ResultError, never a bare ValueError), and
`MeasuredRound` checks every field the fit reads against the physical bounds of a decode
step (`limits.MIN_STEP_SECONDS` to `MAX_STEP_SECONDS`: 0.1 ms to SGLang's 1000 ms
recording cap). Whatever does not pass raises `ResultError` with what is wrong; unknown
round fields are dropped. Whether the rounds are the sweep that was asked for, each cell
once, is `controller.policies.acceptance`'s to judge.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import itertools
import json
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sps_operator.api import limits
from sps_operator.api.limits import MAX_STEP_SECONDS, MIN_STEP_SECONDS
from sps_operator.api.untrusted_json import Unreadable, read_json

STATUS_RUNNING = "running"
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED = "failed"
STATUSES = (STATUS_RUNNING, STATUS_SUCCEEDED, STATUS_FAILED)
KEY_STATUS = "status"
KEY_MESSAGE = "message"
KEY_PROGRESS = "progress"
KEY_MANIFEST = "manifest.json"
KEY_ROUNDS = "rounds.jsonl"
KEY_ROUNDS_GZ = "rounds.jsonl.gz"

# Inline rounds up to this size; beyond it, gzip them into binaryData.
INLINE_ROUNDS_LIMIT = 256 * 1024
# The API server refuses objects above 1 MiB; keep headroom for metadata.
MAX_CONFIGMAP_BYTES = 1024 * 1024 - 16 * 1024
# Bounds on what the operator accepts (the profiler never writes more for a sweep the
# API admits; anything larger is refused before it is decoded).
MAX_ROUNDS_BYTES = 4 * 1024 * 1024  # uncompressed rounds.jsonl
# A round's line: the anchor of a run on a clock ramp carries two lists of at most
# `MAX_RAMP_CHUNKS` chunks of ~52 characters each (≈ 27 KB) besides the usual fields.
MAX_ROUND_LINE_BYTES = 64 * 1024
MAX_ROUNDS = 4096
MAX_MANIFEST_BYTES = 64 * 1024
# Nesting of arrays and objects in one line or the manifest: the profiler's deepest is a
# round's clock-ramp chunks (4) and the manifest's fit quality (< 8). Deeper values are not
# its output, and would take code that recurses over them (json.dumps, pydantic) towards
# Python's recursion limit.
MAX_JSON_DEPTH = 32
MAX_MESSAGE_CHARS = limits.MAX_MESSAGE_LENGTH
MAX_PROGRESS_CHARS = limits.MAX_PROGRESS_LENGTH
MAX_BATCH_SIZE_PER_RANK = 4096
MAX_BATCH_TOKENS = 1 << 20
MAX_GRAPH_TIERS = 1024
MAX_STEADY_STEPS = 10_000_000
MAX_WARNINGS = 32
# The clock-ramp record (`tables.clockramp`): chunks per list (the profiler thins longer
# series to this many, evenly: a warm-up of 3,000 steps makes ≈ 190), and the run clock's
# range.
MAX_RAMP_CHUNKS = 256
MAX_RUN_CLOCK_SECONDS = 1e6
MAX_CLOCK_RUN_ID = 64


class ResultError(ValueError):
    """The result ConfigMap holds something the profiler would never write."""


# --------------------------------------------------------------------------- text


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(value: Any, limit: int) -> str:
    """Printable text of at most `limit` characters: control characters (terminal escape
    sequences included) are dropped, so Job-supplied text cannot repaint a terminal."""
    text = _CONTROL.sub("", str(value))
    if len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    return text


# --------------------------------------------------------------------------- rounds


def _finite(name: str, value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


# One chunk of a clock-ramp record (`tables.clockramp.Chunk`).
RampChunk = tuple[float, float, float]


class ClockRampRecord(BaseModel):
    """The anchor round's record of its run's clock ramp: the warm-up's chunks (the probe,
    cold clocks) and the anchor's own (warm clocks), each [run clock s, step index, log of
    the chunk's median step time]."""

    model_config = ConfigDict(extra="ignore", strict=False, allow_inf_nan=False)

    probe: list[RampChunk] = Field(max_length=MAX_RAMP_CHUNKS)
    anchor: list[RampChunk] = Field(max_length=MAX_RAMP_CHUNKS)

    @field_validator("probe", "anchor")
    @classmethod
    def _chunks_in_range(cls, value: list[RampChunk]) -> list[RampChunk]:
        low, high = math.log(MIN_STEP_SECONDS), math.log(MAX_STEP_SECONDS)
        for clock, step, log_time in value:
            if not 0 <= clock <= MAX_RUN_CLOCK_SECONDS:
                raise ValueError(f"a chunk's run clock {clock:g} s is outside 0–1e6 s")
            if not 0 <= step <= MAX_STEADY_STEPS:
                raise ValueError(f"a chunk's step index {step:g} is out of range")
            if not low <= log_time <= high:
                raise ValueError(f"a chunk's log step time {log_time:g} is outside a step's range")
        return value


class MeasuredRound(BaseModel):
    """One rounds.jsonl line as far as the fit reads it, with plausibility bounds."""

    model_config = ConfigDict(extra="ignore", strict=False)

    repeat: int = Field(default=0, ge=0, le=1024)
    batch_size: int | None = Field(default=None, ge=1, le=MAX_BATCH_SIZE_PER_RANK * 1024)
    batch_size_per_rank: int = Field(ge=1, le=MAX_BATCH_SIZE_PER_RANK)
    frac: float | None = Field(default=None, gt=0.0, le=1.0)
    batch_tokens: int = Field(ge=1, le=MAX_BATCH_TOKENS)
    steps_per_sec: float
    num_steady_steps: int | None = Field(default=None, ge=0, le=MAX_STEADY_STEPS)
    median_step_time: float | None = None
    step_time_se: float | None = Field(default=None, ge=0.0)
    ci_low: float | None = None
    ci_high: float | None = None
    ci_rel_width: float | None = Field(default=None, ge=0.0)
    ci_met: bool | None = None
    graph_tier: int | None = Field(default=None, ge=1, le=MAX_BATCH_TOKENS)
    expected_tier: int | None = Field(default=None, ge=1, le=MAX_BATCH_TOKENS)
    budget: int | None = Field(default=None, ge=0, le=MAX_BATCH_TOKENS)
    graph_tiers: list[int] | None = Field(default=None, max_length=MAX_GRAPH_TIERS)
    warnings: list[str] | None = Field(default=None, max_length=MAX_WARNINGS)
    # What the clock-ramp correction reads (`tables.clockramp.correct_rounds`): the run
    # clock over the measured window, which run's clock it is (a --resume starts another),
    # whether the round was measured on a live ramp, the steps' lag-1 correlation, and on
    # the anchor round the ramp's record. Dropping them would fit the raw, ramp-slowed
    # medians with intervals that do not know about the ramp.
    clock_s: tuple[float, float] | None = None
    clock_run: str | None = Field(default=None, max_length=MAX_CLOCK_RUN_ID)
    clock_on_ramp: bool | None = None
    ar1: float | None = Field(default=None, ge=-1.0, le=1.0)
    clock_ramp: ClockRampRecord | None = None
    # Steps the drift test dropped from the round's start (its level still moving): on a
    # run on a clock ramp the error bound trusts such a round no further than the table
    # holds without it (`tables.bound.unsteady_shift_rel`); dropping the field would make
    # the operator's bound narrower than the profiler's for the same rounds.
    dropped_drift_steps: int | None = Field(default=None, ge=0, le=MAX_STEADY_STEPS)

    @field_validator("clock_s")
    @classmethod
    def _clock_window(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is None:
            return None
        start, end = value
        if not (0 <= start <= end <= MAX_RUN_CLOCK_SECONDS):
            raise ValueError(
                f"clock_s {list(value)} must be [start, end] seconds, 0 <= start <= end"
            )
        return value

    @field_validator("warnings")
    @classmethod
    def _clean_warnings(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else [clean_text(w, 1024) for w in value]

    @field_validator("steps_per_sec", "median_step_time", "step_time_se", "ci_low", "ci_high")
    @classmethod
    def _finite_fields(cls, value: float | None, info: Any) -> float | None:
        return None if value is None else _finite(info.field_name, value)

    @model_validator(mode="after")
    def _plausible(self) -> MeasuredRound:
        step = 1.0 / self.steps_per_sec if self.steps_per_sec > 0 else math.inf
        if not MIN_STEP_SECONDS <= step <= MAX_STEP_SECONDS:
            raise ValueError(
                f"steps_per_sec {self.steps_per_sec:g} means a decode step of {step * 1e3:g} ms; "
                f"a real step takes {MIN_STEP_SECONDS * 1e3:g}–{MAX_STEP_SECONDS * 1e3:g} ms "
                "(SGLang records step_cpu_ms only in (0, 1000])"
            )
        for name in ("median_step_time", "ci_low", "ci_high"):
            value = getattr(self, name)
            if value is not None and not MIN_STEP_SECONDS <= value <= MAX_STEP_SECONDS:
                raise ValueError(f"{name} {value:g} s is outside a decode step's range")
        if self.median_step_time is not None and not math.isclose(
            self.median_step_time, step, rel_tol=1e-6
        ):
            raise ValueError(
                f"median_step_time {self.median_step_time:g} s disagrees with steps_per_sec "
                f"{self.steps_per_sec:g}"
            )
        if (
            self.ci_low is not None
            and self.ci_high is not None
            and not (self.ci_low <= step * (1 + 1e-9) and step <= self.ci_high * (1 + 1e-9))
        ):
            raise ValueError("the median step time lies outside its own confidence interval")
        if self.step_time_se is not None and self.step_time_se > step:
            raise ValueError("step_time_se exceeds the step time itself")
        if self.batch_tokens > self.batch_size_per_rank * 1024:
            raise ValueError(
                f"batch_tokens {self.batch_tokens} is more than 1024 verify tokens per request "
                f"for batch_size_per_rank {self.batch_size_per_rank}"
            )
        if self.graph_tiers is not None:
            tiers = self.graph_tiers
            if any(t < 1 or t > MAX_BATCH_TOKENS for t in tiers) or any(
                b <= a for a, b in itertools.pairwise(tiers)
            ):
                raise ValueError("graph_tiers must be strictly increasing positive token counts")
        return self

    def to_round(self) -> dict[str, Any]:
        """The validated line, known fields only (what the operator fits and stores)."""
        return self.model_dump(exclude_unset=True)


def validate_rounds(raw: Sequence[Any], source: str = KEY_ROUNDS) -> list[dict[str, Any]]:
    """Every line checked; the first bad one is refused with its line number."""
    if len(raw) > MAX_ROUNDS:
        raise ResultError(f"{source} has {len(raw)} rounds; at most {MAX_ROUNDS} are accepted")
    out: list[dict[str, Any]] = []
    for number, value in enumerate(raw, start=1):
        if not isinstance(value, dict):
            raise ResultError(f"{source} line {number} is not a JSON object")
        try:
            out.append(MeasuredRound.model_validate(value).to_round())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "round"
            raise ResultError(
                f"{source} line {number}: {where}: {clean_text(first['msg'], 300)}"
            ) from None
    return out


# --------------------------------------------------------------------------- encoding


def rounds_to_jsonl(rounds: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rounds)


def encode_rounds(
    rounds: Sequence[Mapping[str, Any]], inline_limit: int = INLINE_ROUNDS_LIMIT
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(data, binaryData) entries for the rounds: inline text when small, gzip when large.
    The other key is set to None so a merge patch removes a stale one."""
    text = rounds_to_jsonl(rounds)
    if len(text.encode()) <= inline_limit:
        return {KEY_ROUNDS: text}, {KEY_ROUNDS_GZ: None}
    packed = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    return {KEY_ROUNDS: None}, {KEY_ROUNDS_GZ: packed}


def object_size(*maps: Mapping[str, str | None]) -> int:
    """Bytes of the keys and values a ConfigMap would hold."""
    return sum(len(k) + len(v.encode()) for m in maps for k, v in m.items() if v is not None)


def build_patch(
    *,
    status: str,
    message: str = "",
    progress: str | None = None,
    manifest: Mapping[str, Any] | None = None,
    rounds: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A merge patch for the result ConfigMap (the profiler's side). Raises ResultError
    when it cannot fit."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    data: dict[str, str | None] = {KEY_STATUS: status, KEY_MESSAGE: message}
    binary: dict[str, str | None] = {}
    if progress is not None:
        data[KEY_PROGRESS] = progress
    if manifest is not None:
        # The rounds travel once, in rounds.jsonl; keep the manifest small.
        slim = {k: v for k, v in manifest.items() if k != "round_summaries"}
        data[KEY_MANIFEST] = json.dumps(slim, separators=(",", ":"), default=str)
    if rounds is not None:
        rounds_data, binary = encode_rounds(rounds)
        data.update(rounds_data)
    size = object_size(data, binary)
    if size > MAX_CONFIGMAP_BYTES:
        raise ResultError(
            f"The result is {size} bytes, above the ConfigMap limit of {MAX_CONFIGMAP_BYTES} "
            "bytes even compressed; the rounds are kept on disk next to --out. Profile fewer "
            "cells (--batch-size / --fracs / --repeats) per run."
        )
    patch: dict[str, Any] = {"data": data}
    if binary:
        patch["binaryData"] = binary
    return patch


# --------------------------------------------------------------------------- decoding


def _bounded_gunzip(packed: str, limit: int) -> bytes:
    """Decode base64 gzip, refusing (before allocating it) anything that expands past
    `limit` bytes."""
    if len(packed) > 2 * MAX_CONFIGMAP_BYTES:
        raise ResultError(f"{KEY_ROUNDS_GZ} is {len(packed)} characters; too large")
    try:
        raw = base64.b64decode(packed, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ResultError(f"{KEY_ROUNDS_GZ} is not base64: {exc}") from None
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ResultError(f"{KEY_ROUNDS_GZ} is not gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise ResultError(
            f"{KEY_ROUNDS_GZ} expands beyond {limit} bytes; refused without decompressing it"
        )
    if not inflater.eof:
        raise ResultError(f"{KEY_ROUNDS_GZ} is a truncated gzip stream")
    return out


def parse_json(text: str, what: str, max_bytes: int = MAX_MANIFEST_BYTES) -> Any:
    """Untrusted JSON text through the one bounded parser (`untrusted_json`), every
    refusal a ResultError naming `what`: malformed text, more than `max_bytes`, nesting
    past `MAX_JSON_DEPTH`, an integer beyond Python's int-string limit."""
    value = read_json(text, max_bytes=max_bytes, max_depth=MAX_JSON_DEPTH, non_finite=True)
    if isinstance(value, Unreadable):
        raise ResultError(f"{what} {value.why}")
    return value


def parse_jsonl(text: str, source: str) -> list[Any]:
    lines: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if len(line) > MAX_ROUND_LINE_BYTES:
            raise ResultError(f"{source} line {number} is {len(line)} characters; too long")
        if len(lines) >= MAX_ROUNDS:
            raise ResultError(f"{source} has more than {MAX_ROUNDS} lines")
        lines.append(parse_json(line, f"{source} line {number}", MAX_ROUND_LINE_BYTES))
    return lines


@dataclass(frozen=True)
class ProfileResult:
    """What a profiling run published, validated."""

    status: str
    message: str
    progress: str
    manifest: dict[str, Any] = field(default_factory=dict)
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.status in (STATUS_SUCCEEDED, STATUS_FAILED)


def _text_value(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise ResultError(f"{key} is not a string")
    return value


def read_result(
    data: Mapping[str, Any] | None, binary_data: Mapping[str, Any] | None
) -> ProfileResult:
    """Parse and validate a result ConfigMap's `data` and `binaryData` (base64 values, as
    the API returns them). `status` is "" when the profiler has not written anything yet.

    Raises ResultError on anything the profiler would never write: an unknown status,
    oversized or malformed content, implausible rounds. Text is cleaned and bounded.
    """
    data = data or {}
    binary_data = binary_data or {}
    status = _text_value(data, KEY_STATUS)
    if status and status not in STATUSES:
        raise ResultError(f"unknown status {clean_text(status, 40)!r} in the result ConfigMap")
    manifest: dict[str, Any] = {}
    manifest_text = _text_value(data, KEY_MANIFEST)
    if manifest_text:
        if len(manifest_text) > MAX_MANIFEST_BYTES:
            raise ResultError(f"{KEY_MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
        parsed = parse_json(manifest_text, KEY_MANIFEST)
        if not isinstance(parsed, dict):
            raise ResultError(f"{KEY_MANIFEST} is not a JSON object")
        manifest = parsed
    status_message = clean_text(_text_value(data, KEY_MESSAGE), MAX_MESSAGE_CHARS)
    progress = clean_text(_text_value(data, KEY_PROGRESS), MAX_PROGRESS_CHARS)
    if status != STATUS_SUCCEEDED:
        # Rounds are read only from a run that says it succeeded: a failed run's message
        # must reach the user even when its rounds are garbage.
        return ProfileResult(status, status_message, progress, manifest)
    return ProfileResult(
        status, status_message, progress, manifest, decode_rounds(data, binary_data)
    )


def decode_rounds(
    data: Mapping[str, Any] | None, binary_data: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The validated rounds of a ConfigMap written with `encode_rounds` (a result, or a
    table ConfigMap's provenance). Raises ResultError."""
    data = data or {}
    binary_data = binary_data or {}
    raw: list[Any] = []
    packed = binary_data.get(KEY_ROUNDS_GZ)
    if packed:
        if not isinstance(packed, str):
            raise ResultError(f"{KEY_ROUNDS_GZ} is not a string")
        text = _bounded_gunzip(packed, MAX_ROUNDS_BYTES)
        try:
            raw = parse_jsonl(text.decode("utf-8"), KEY_ROUNDS_GZ)
        except UnicodeDecodeError:
            raise ResultError(f"{KEY_ROUNDS_GZ} is not UTF-8 text") from None
        source = KEY_ROUNDS_GZ
    else:
        inline = _text_value(data, KEY_ROUNDS)
        if len(inline) > MAX_ROUNDS_BYTES:
            raise ResultError(f"{KEY_ROUNDS} is larger than {MAX_ROUNDS_BYTES} bytes")
        raw = parse_jsonl(inline, KEY_ROUNDS)
        source = KEY_ROUNDS
    return validate_rounds(raw, source)
