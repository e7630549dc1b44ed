"""Fuzzing the operator's passes with Hypothesis: hostile results, odd Deployments, odd
specs and API faults, against the invariants of the safety contract.

* no table that fails its self-check is ever published, and no Deployment's template
  ever names a table that was not measured for it;
* every pass ends with a status (conditions written), in bounded time and memory;
* a pass never raises.

`make test` runs it with a fixed seed and budget (the `ci` profile in tests/conftest.py);
`HYPOTHESIS_PROFILE=long .venv/bin/pytest tests/unit/test_fuzz_operator.py` searches for
much longer with fresh randomness.
"""

from __future__ import annotations

import base64
import gzip
import json
import time
import tracemalloc
from typing import Any

from controller_harness import NS, SERVER_ARGS, Harness, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from sps_operator.api import labels as L
from sps_operator.api.limits import DEFAULT_MAX_BATCH_SIZE, MIN_STEP_SECONDS
from sps_operator.api.spec import SpsProfileSpec
from sps_operator.controller.sglang.serverconfig import (
    ServerProblem,
    legacy_table_fingerprint,
    parse_server,
    server_config,
    table_fingerprint,
)
from sps_operator.profiler.sweep import build_request_count_sweep
from sps_operator.tables.formats import load_sps_table_text
from sps_operator.tables.selfcheck import self_check

PASS_SECONDS = 30.0  # a liveness bound, far above a pass's real cost (milliseconds)
PASS_BYTES = 256 * 1024 * 1024

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1.0, max_value=5000.0),  # plausible steps/s
    st.integers(min_value=-(2**40), max_value=2**40),
    st.sampled_from([0, 1, 1e8, 1e-12, -1.0]),
)
small = st.integers(min_value=1, max_value=8)
round_dicts = st.fixed_dictionaries(
    {
        "batch_size_per_rank": st.one_of(small, numbers, st.none()),
        "batch_tokens": st.one_of(small.map(lambda b: b * 4), numbers),
        "steps_per_sec": numbers,
    },
    optional={
        "repeat": st.one_of(st.integers(0, 2), numbers),
        "frac": st.one_of(st.none(), st.sampled_from([0.25, 0.5, 1.0]), numbers),
        "step_time_se": numbers,
        "ci_low": numbers,
        "ci_high": numbers,
        "median_step_time": numbers,
        "graph_tiers": st.lists(st.integers(-4, 64), max_size=6),
        "warnings": st.lists(st.text(max_size=40), max_size=3),
    },
)


def sane_round(bs: int, scale: float, repeat: int) -> dict[str, Any]:
    return {
        "repeat": repeat,
        "batch_size_per_rank": bs,
        "batch_tokens": bs * 4,
        "steps_per_sec": 1.0 / ((0.01 + 0.001 * bs) * scale),
    }


plausible = st.lists(
    st.builds(sane_round, st.sampled_from([1, 2, 4]), st.floats(0.2, 5.0), st.integers(0, 1)),
    min_size=1,
    max_size=8,
)
results = st.one_of(
    st.lists(round_dicts, max_size=8),
    plausible,
    st.tuples(plausible, round_dicts).map(lambda t: [*t[0], t[1]]),
)
# A result line: a round, or raw text no json.dumps of a round writes.
Line = dict[str, Any] | str
# What a hostile Job makes of an honest result (issue 18: #7, #8, #23, #24), and the reason
# the run must end with; "complete" is the honest result itself.
HOSTILE = {
    "partial": "IncompleteSweep",
    "duplicated": "SweepMismatch",
    "huge integer": "ResultRefused",
    "nested": "ResultRefused",
    "sub-physical": "ResultRefused",
}


def complete_result(spec: dict[str, Any], scale: float, noise: list[float]) -> list[Line]:
    """Every cell of the (first phase of the) sweep the spec asks for once, on one plausible
    GPU, as sps-profiler would measure it (its own sweep expansion); [] for a spec the API
    refuses (no run)."""
    try:
        sweep = SpsProfileSpec.model_validate(profile_body(**spec)["spec"]).table.sweep
    except ValidationError:
        return []
    batch_sizes = (
        sorted(set(sweep.batch_sizes))
        if sweep.batch_sizes
        else build_request_count_sweep(sweep.max_batch_size or DEFAULT_MAX_BATCH_SIZE)
    )
    cells = [(bs, repeat) for repeat in range(sweep.repeats) for bs in batch_sizes]
    return [
        sane_round(bs, scale * (1 + noise[i % len(noise)]), repeat)
        for i, (bs, repeat) in enumerate(cells)
    ]


def hostile_result(draw: st.DrawFn, honest: list[Line], kind: str) -> list[Line]:
    out = list(honest)
    at = draw(st.integers(0, len(out) - 1))
    if kind == "partial":
        keep = draw(st.lists(st.integers(0, len(out) - 1), min_size=1, max_size=len(out) - 1))
        return [out[i] for i in sorted(set(keep))]
    if kind == "duplicated":
        copy = dict(out[at])  # type: ignore[arg-type]
        copy["steps_per_sec"] *= draw(st.sampled_from([1.0, 0.9, 1.1]))
        return out + [copy] * draw(st.integers(1, 4))
    if kind == "huge integer":
        field = draw(st.sampled_from(["steps_per_sec", "repeat", "batch_tokens", "budget"]))
        digits = "9" * draw(st.integers(4301, 6000))
        out[at] = json.dumps(out[at])[:-1] + f', "{field}": {digits}}}'
        return out
    if kind == "nested":
        depth = draw(st.one_of(st.integers(33, 200), st.integers(2000, 20_000)))
        field = draw(st.sampled_from(["warnings", "graph_tiers", "clock_ramp", "load_info"]))
        out[at] = json.dumps(out[at])[:-1] + f', "{field}": ' + "[" * depth + "]" * depth + "}"
        return out
    # Steps in seconds where SGLang writes ms (a 10 ms step as 0.01 "ms"): all, or one. Only
    # steps under 100 ms fall below the floor that way, so the step is drawn below it.
    assert kind == "sub-physical"
    which = range(len(out)) if draw(st.booleans()) else [at]
    for i in which:
        seconds = draw(st.floats(1e-6, MIN_STEP_SECONDS, exclude_max=True))
        out[i] = {**out[i], "steps_per_sec": 1 / seconds}  # type: ignore[dict-item]
    return out


def encode(rounds: list[Line], how: str) -> tuple[dict[str, str], dict[str, str]]:
    text = "".join(
        (r if isinstance(r, str) else json.dumps(r, allow_nan=True)) + "\n" for r in rounds
    )
    if how == "gzip":
        return {"status": "succeeded"}, {
            "rounds.jsonl.gz": base64.b64encode(gzip.compress(text.encode())).decode()
        }
    if how == "torn":
        return {"status": "succeeded", "rounds.jsonl": text[: len(text) // 2]}, {}
    if how == "failed":
        return {"status": "failed", "message": text[:5000]}, {}
    return {"status": "succeeded", "rounds.jsonl": text}, {}


containers = st.one_of(
    st.just({}),
    st.just(
        {
            "command": [
                "sh",
                "-c",
                "exec python3 -m sglang.launch_server " + " ".join(SERVER_ARGS),
            ],
            "args": None,
        }
    ),
    st.just({"command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}),
    st.just({"args": [a if a != "DSPARK" else "EAGLE" for a in SERVER_ARGS]}),
    st.lists(st.text(max_size=12), max_size=5).map(lambda a: {"args": [*SERVER_ARGS, *a]}),
)
faults = st.one_of(
    st.none(),
    st.tuples(
        st.sampled_from(
            ["create_ConfigMap", "create_Job", "apply_Deployment", "patch_Deployment",
             "list_config_maps", "list_deployments", "get", "delete_Job"]
        ),
        st.sampled_from([400, 403, 404, 409, 422, 429, 500, 503]),
    ),
)  # fmt: skip
specs = st.fixed_dictionaries(
    {},
    optional={
        "table": st.one_of(
            st.just({"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4], "repeats": 2}}),
            st.just(
                {"kind": "Additive", "sweep": {"batchSizes": [1, 2, 4], "fracs": [0.25, 0.5, 1.0]}}
            ),
            st.dictionaries(
                st.sampled_from(["kind", "sweep", "bogus"]),
                st.one_of(st.text(max_size=5), st.integers(), st.none()),
                max_size=2,
            ),
        ),
        "rollout": st.one_of(
            st.just({"mode": "Disabled"}),
            st.just({"mode": "AnnotateOnly", "tableConfigMap": "stable"}),
        ),
        "gates": st.just({"maxChange": 0.5}),
        "historyLimit": st.integers(-1, 3),
    },
)


def one_pass(h: Harness) -> None:
    tracemalloc.start()
    started = time.monotonic()
    h.run_pass()  # never raises: any exception fails the example
    elapsed = time.monotonic() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < PASS_SECONDS and peak < PASS_BYTES, (elapsed, peak)
    status = h.status()
    assert status.get("conditions"), "a pass ended without writing conditions"


def check_invariants(h: Harness) -> None:
    for cm in h.kube.kinds("ConfigMap"):
        labels = cm["metadata"].get("labels") or {}
        if labels.get(L.LABEL_COMPONENT) != L.COMPONENT_TABLE:
            continue
        table = load_sps_table_text(cm["data"][L.TABLE_KEY])
        assert not self_check(table), f"published table {cm['metadata']['name']} fails self-check"
    try:
        spec = SpsProfileSpec.model_validate(h.kube.obj("SpsProfile", "p")["spec"])
    except ValidationError:
        assert not h.kube.applied, "an invalid spec wrote to a Deployment"
        return
    for dep in h.kube.kinds("Deployment"):
        annotations = (dep["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        name = annotations.get(L.ANNOTATION_TABLE)
        if not name or ("ConfigMap", NS, name) not in h.kube.objects:
            continue
        cm = h.kube.obj("ConfigMap", name)
        container = dep["spec"]["template"]["spec"]["containers"][0]
        try:
            parsed = parse_server(container)
        except ServerProblem as exc:
            raise AssertionError(f"a table went onto a server it cannot serve: {exc}") from exc
        config = server_config(container, parsed)
        fingerprint = table_fingerprint(config, spec.table.to_k8s())
        # Measured for this server (meta.json), labelled with its fingerprint or, for
        # 0.1.0 after a rollback, with its version-1 one (api/legacy_tables.py).
        assert json.loads(cm["data"][L.META_KEY])["fingerprint"] == fingerprint
        legacy = legacy_table_fingerprint(config, spec.table.to_k8s())
        assert cm["metadata"]["labels"][L.LABEL_FINGERPRINT] in (fingerprint, legacy)


@given(
    spec=specs,
    container=containers,
    random_result=results,
    kind=st.sampled_from(["random", "complete", *HOSTILE]),
    scale=st.floats(0.2, 3.0),  # bs 256 at 3x: 0.8 s, inside a step's range
    noise=st.lists(st.floats(-0.02, 0.02), min_size=1, max_size=4),
    how=st.sampled_from(["inline", "gzip", "torn", "failed"]),
    fault=faults,
    data=st.data(),
)
def test_no_input_breaks_the_safety_contract(
    spec: dict[str, Any],
    container: dict[str, Any],
    random_result: list[dict[str, Any]],
    kind: str,
    scale: float,
    noise: list[float],
    how: str,
    fault: tuple[str, int] | None,
    data: st.DataObject,
) -> None:
    result: list[Line] = list(random_result)
    if kind != "random":
        result = complete_result(spec, scale, noise)
        if kind in HOSTILE and result:
            result = hostile_result(data.draw, result, kind)
    h = Harness()
    dep = deployment(**container)
    if spec.get("rollout", {}).get("mode") == "AnnotateOnly":
        pod = dep["spec"]["template"]["spec"]
        pod["volumes"] = [{"name": "t", "configMap": {"name": "stable"}}]
        pod["containers"][0]["volumeMounts"] = [{"name": "t", "mountPath": "/etc/sps/table"}]
        if pod["containers"][0].get("args"):
            pod["containers"][0]["args"] += [
                "--speculative-dspark-sps-table-path",
                "/etc/sps/table/table.json",
            ]
    h.add(dep)
    h.add(profile_body(**spec))
    h.place()
    one_pass(h)
    run = h.status().get("currentRun")
    if run:
        data, binary = encode(result, how)
        h.finish(result={"data": data, "binaryData": binary}, ok=how != "failed")
    if fault is not None:
        h.kube.fail[fault[0]] = ApiException(status=fault[1], reason="Fuzzed")
    for _ in range(4):
        h.tick(61)
        one_pass(h)
        check_invariants(h)
    if run and how == "failed":
        failure = h.status().get("lastFailure") or {}
        assert failure.get("reason"), "a failed run left no reason"
    if run and kind in HOSTILE:
        # Short, duplicated, unparsable or sub-physical: never a table, always a reason.
        assert not h.status().get("tables"), f"a {kind} result became a table"
        failure = h.status().get("lastFailure") or {}
        if fault is None and how != "failed":
            # A torn result may also end mid-line (not JSON) or on a line boundary (short).
            expected = {HOSTILE[kind]}
            if how == "torn":
                expected |= {"ResultRefused", "IncompleteSweep"}
            assert failure.get("reason") in expected, (kind, failure)
    if run and kind == "complete" and how in ("inline", "gzip") and fault is None:
        # The honest result is accepted (so the refusals above are not vacuous): a table,
        # or for an Additive profile the off-diagonal phase it seeds.
        status = h.status()
        phase = (status.get("currentRun") or {}).get("phase")
        assert status.get("tables") or phase == "OffDiagonal", status.get("lastFailure")
    json.dumps(h.status(), allow_nan=False)  # the API server would refuse NaN or infinity
