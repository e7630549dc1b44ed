"""The cost inputs SGLang gained after 15a43983 (issue 34 §4): every `SGL_` spelling of a
fingerprinted variable is read as SGLang reads it (copied over `SGLANG_X` at start, so it
wins), the inputs added to the list count only when set to something other than SGLang's
default, and a server that sets none of them keeps its fingerprint across the upgrade."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import fingerprint as F
from sps_operator.api.fingerprint import Kind
from sps_operator.api.reasons import HIDDEN_COST_INPUT
from sps_operator.controller.sglang.podenv import resolve_env
from sps_operator.controller.sglang.serverconfig import (
    ServerConfig,
    ServerProblem,
    parse_server,
    server_config,
)

BASE = ["--model-path", "org/m", "--speculative-algorithm", "DSPARK", "--tp", "4",
        "--enable-dp-attention", "--dp-size", "2"]  # fmt: skip
ENV_ENTRIES = [e for e in F.ENV_INPUTS if e.fingerprinted]


def container(args: list[str] | None = None, env: list[dict[str, Any]] | None = None,
              image: str = "lmsysorg/sglang:v0.5.17") -> dict[str, Any]:  # fmt: skip
    return {
        "name": "sglang",
        "image": image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": [*BASE, *(args or [])],
        "env": env or [],
    }


def literal(env: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in env.items()]


def config(c: dict[str, Any], version: str | None = "unknown") -> ServerConfig:
    return server_config(c, parse_server(c), version)


def fp(args: list[str] | None = None, env: dict[str, str] | None = None) -> str:
    return config(container(args, literal(env or {}))).fingerprint()


def sglang_environ(env: dict[str, str]) -> dict[str, str]:
    """What SGLang's environ.py leaves in os.environ at import (the oracle): each
    deprecated old name copied over its new one, then every `SGL_X` over `SGLANG_X`."""
    out = dict(env)
    for entry in F.ENV_INPUTS:
        for old in entry.old_names:
            if old in out:
                out[entry.name] = out[old]
    for key, value in list(out.items()):
        if key.startswith("SGL_"):
            out[key.replace("SGL_", "SGLANG_", 1)] = value
    return out


def other_value(entry: F.CostInput) -> str:
    if entry.kind == Kind.BOOL:
        return "false" if entry.default == "true" else "true"
    return {"SGLANG_RAGGED_VERIFY_MODE": "compact", "SGLANG_SPEC_TP_SYNC": "rng"}.get(
        entry.name, "7"
    )


# --------------------------------------------------------------------------- SGL_ spellings


@pytest.mark.parametrize("entry", ENV_ENTRIES, ids=lambda e: e.name)
def test_every_spelling_of_a_variable_is_that_variable(entry: F.CostInput) -> None:
    value = other_value(entry)
    canonical = fp(env={entry.name: value})
    assert canonical != fp()
    for spelling in entry.env_spellings():
        changed = config(container(env=literal({spelling: value})))
        assert changed.fingerprint() == canonical, spelling
        read = next(r for r in changed.read if r.name == entry.name)
        assert read.counted and (spelling == entry.name or spelling in read.where)


@pytest.mark.parametrize("entry", ENV_ENTRIES, ids=lambda e: e.name)
def test_the_sgl_spelling_wins_over_the_sglang_one_as_in_sglang(entry: F.CostInput) -> None:
    sgl = entry.sgl_spelling
    assert sgl is not None
    value = other_value(entry)
    # Written either way round in env, SGL_X is what the server runs with.
    for env in ({entry.name: "junk-default", sgl: value}, {sgl: value, entry.name: "x"}):
        assert fp(env=env) == fp(env={entry.name: value})
    # A script's assignment is set last (wins over env) but not over SGLang's own copy.
    script = container(env=literal({sgl: value}))
    script["command"], script["args"] = (
        ["sh", "-c"],
        [f"{entry.name}=zzz exec python3 -m sglang.launch_server {' '.join(BASE)}"],
    )
    assert config(script).fingerprint() == fp(env={entry.name: value})


names = st.sampled_from(
    sorted({s for e in ENV_ENTRIES for s in e.env_spellings()} | {"SGL_OTHER", "SGLANG_X"})
)
values = st.sampled_from(["0", "1", "true", "no", "compact", "static", "rng", "all", "", " y "])


@given(env=st.lists(st.tuples(names, values), max_size=8))
def test_the_environment_is_read_as_sglang_resolves_it(env: list[tuple[str, str]]) -> None:
    written = dict(env)  # the kubelet: the last entry of a name wins
    resolved = sglang_environ(written)
    as_sglang_runs = {e.name: resolved[e.name] for e in ENV_ENTRIES if e.name in resolved}
    assert fp(env=written) == fp(env=as_sglang_runs)


def test_a_hidden_spelling_matters_only_when_sglang_reads_it() -> None:
    secret = {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    overwritten = [{"name": "SGLANG_RAGGED_VERIFY_MODE", **secret},
                   {"name": "SGL_RAGGED_VERIFY_MODE", "value": "compact"}]  # fmt: skip
    c = container(env=overwritten)
    command = parse_server(c, resolve_env(c, "ns", {}))
    assert server_config(c, command).verify_mode == "compact"
    winner = [{"name": "SGL_RAGGED_VERIFY_MODE", **secret}]
    c = container(env=winner)
    with pytest.raises(ServerProblem) as refused:
        parse_server(c, resolve_env(c, "ns", {}))
    assert refused.value.reason == HIDDEN_COST_INPUT
    assert "SGL_RAGGED_VERIFY_MODE" in str(refused.value)


def test_the_sgl_spelling_decides_the_mode_compatibility_reads() -> None:
    c = container(env=literal({"SGL_RAGGED_VERIFY_MODE": "compact"}))
    assert config(c).verify_mode == "compact"


def test_sgl_spellings_of_cost_looking_variables_are_reported() -> None:
    c = container(env=literal({"SGL_DSPARK_NEW_KNOB": "1", "SGLANG_DSPARK_OTHER": "1"}))
    gaps = " ".join(config(c).unfingerprinted)
    assert "SGL_DSPARK_NEW_KNOB" in gaps and "SGLANG_DSPARK_OTHER" in gaps
    known = container(env=literal({"SGL_DSPARK_FAST_KERNEL": "0"}))
    assert not config(known).unfingerprinted


def test_version_1_read_only_the_sglang_spelling() -> None:
    """Fingerprint version 1 is frozen: an SGL_ spelling it never read changes nothing
    there (so a v1 table is still adopted, or not, as before)."""
    plain = config(container())
    spelled = config(container(env=literal({"SGL_RAGGED_VERIFY_MODE": "compact"})))
    assert spelled.legacy_fingerprint() == plain.legacy_fingerprint()
    assert spelled.fingerprint() != plain.fingerprint()


# --------------------------------------------------------------------------- new inputs


@pytest.mark.parametrize(
    ("flag", "default", "other"),
    [("--pp-size", "1", "2"), ("--pipeline-parallel-size", "1", "2"), ("--nnodes", "1", "2"),
     ("--disaggregation-mode", "null", "decode")],
)  # fmt: skip
def test_a_new_flag_at_sglang_s_default_is_the_server_without_it(
    flag: str, default: str, other: str
) -> None:
    assert fp([flag, default]) == fp([f"{flag}={default}"]) == fp()
    assert fp([flag, other]) != fp()
    read = config(container([flag, default])).read
    assert any(r.label.startswith("--") and not r.counted and "default" in r.note for r in read)


def test_a_flag_of_the_first_list_at_its_default_still_counts() -> None:
    """Flags of version 2's first list keep counting when written at their default: a new
    rule there would change fingerprints of servers that did not change."""
    assert fp(["--page-size", "1"]) != fp()


@pytest.mark.parametrize(
    "args",
    [["--prefill-attention-backend", "fa3"], ["--enable-w4a4-mxfp4-megamoe"],
     ["--speculative-enable-w4a4-mxfp4-megamoe"], ["--speculative-dsa-topk-backend", "flashmla"],
     ["--disable-custom-all-reduce"], ["--enable-nccl-nvls"], ["--enable-symm-mem"],
     ["--enable-eplb"], ["--disaggregation-mode", "decode"]],
)  # fmt: skip
def test_each_new_flag_counts(args: list[str]) -> None:
    assert fp(args) != fp()


@pytest.mark.parametrize(("name", "default"), [
    ("SGLANG_DSPARK_OPT_FUSED_GREEDY_MARKOV", "0"), ("SGLANG_SPEC_TP_SYNC", "all"),
    ("SGLANG_ENABLE_METADATA_GLUE_GRAPH", "false"), ("SGLANG_OPT_FUSED_KDA_VERIFY", "no"),
    ("SGLANG_TEST_RAGGED_VERIFY_FORCE_UNIFORM_CAPTURE", "0")])  # fmt: skip
def test_each_new_variable_counts_away_from_its_default(name: str, default: str) -> None:
    assert fp(env={name: default}) == fp()
    assert fp(env={name: other_value(F.BY_NAME[name])}) != fp()


def test_a_switch_whose_default_moved_between_releases_counts_whenever_written() -> None:
    name = "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2"
    on, off = fp(env={name: "1"}), fp(env={name: "false"})
    assert len({on, off, fp()}) == 3
    assert fp(env={name: "yes"}) == on
    # Its deprecated old name is copied over it; the SGL_ spelling is copied last.
    assert fp(env={"SGLANG_USE_JIT_ALL_REDUCE": "0", name: "1"}) == off
    assert fp(env={"SGLANG_USE_JIT_ALL_REDUCE": "0", "SGL_OPT_USE_CUSTOM_ALL_REDUCE_V2": "1"}) == on


def test_the_per_pod_flags_of_a_group_are_read_and_change_nothing() -> None:
    group = ["--node-rank", "1", "--dist-init-addr", "leader.svc:5000"]
    assert fp(group) == fp()
    c = config(container(group))
    assert not c.unfingerprinted


def test_prefill_flags_outside_the_list_are_reported_as_cost_looking() -> None:
    c = config(container(["--prefill-new-kernel", "x"]))
    assert any("--prefill-new-kernel" in u for u in c.unfingerprinted)


# --------------------------------------------------------------------------- the upgrade

# Computed by the operator before issue 34 (git f2b14e4~1) for the same containers: a
# server that sets none of the new inputs keeps its table's key (and its version-1 key).
BEFORE_ISSUE_34 = [
    ([], {}, "v2-5d1368c4d2eb6276", "c9b9945c86c9a318"),
    ([], {"SGLANG_RAGGED_VERIFY_MODE": "compact", "SGLANG_DSPARK_FAST_KERNEL": "0"},
     "v2-4158b9397c2b518a", "d9fad4adf28da845"),
    (["--cuda-graph-max-bs", "64"], {"SGLANG_RAGGED_VERIFY_MODE": "compact"},
     "v2-bc0307974e119713", "e7b9cd97e1436886"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "env", "v2", "v1"), BEFORE_ISSUE_34)
def test_a_server_that_sets_no_new_input_keeps_its_fingerprint(
    args: list[str], env: dict[str, str], v2: str, v1: str
) -> None:
    c = container(args, literal(env))
    got = server_config(c, parse_server(c))
    assert (got.fingerprint(), got.legacy_fingerprint()) == (v2, v1)
    # ... and writing a new flag at its default does not change that.
    defaults = ["--pp-size", "1", "--nnodes", "1", "--disaggregation-mode", "null"]
    c = container([*args, *defaults], literal({**env, "SGLANG_SPEC_TP_SYNC": "all"}))
    assert server_config(c, parse_server(c)).fingerprint() == v2


NEW_FLAGS = {  # flag: (SGLang's default, another value)
    "--pp-size": ("1", "2"), "--pipeline-parallel-size": ("1", "4"), "--nnodes": ("1", "2"),
    "--disaggregation-mode": ("null", "decode"), "--prefill-attention-backend": (None, "fa3"),
    "--speculative-dsa-topk-backend": (None, "triton"),
}  # fmt: skip
NEW_SWITCHES = ["--enable-eplb", "--enable-symm-mem", "--enable-nccl-nvls",
                "--disable-custom-all-reduce", "--enable-w4a4-mxfp4-megamoe",
                "--speculative-enable-w4a4-mxfp4-megamoe"]  # fmt: skip
written = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(sorted(NEW_FLAGS)), st.booleans(), st.booleans()),
        st.tuples(st.sampled_from(NEW_SWITCHES), st.just(False), st.booleans()),
    ),
    max_size=6,
)


@given(flags=written)
def test_any_command_line_of_new_inputs_counts_exactly_what_differs_from_sglang(
    flags: list[tuple[str, bool, bool]],
) -> None:
    """Written in any order, `--flag v` or `--flag=v`, the last one winning: the server's
    fingerprint is that of the command line with only the non-default values."""
    args: list[str] = []
    final: dict[str, str | None] = {}
    for flag, other, inline in flags:
        entry = F.FLAG_SPELLINGS[flag]
        if flag in NEW_SWITCHES:
            args.append(flag)
            final[entry.name] = "true"
            continue
        default, another = NEW_FLAGS[flag]
        value = another if other or default is None else default
        args += [f"{flag}={value}"] if inline else [flag, value]
        final[entry.name] = value
    counted = config(container(args)).inputs
    for name, value in final.items():
        entry = F.BY_NAME[name]
        if value is None or (entry.kind != Kind.SWITCH and value == entry.default):
            assert name not in counted
        else:
            assert counted[name] == value
    expected = [w for n, v in final.items() if v is not None and v != F.BY_NAME[n].default
                for w in ([F.BY_NAME[n].spellings[0]] if F.BY_NAME[n].kind == Kind.SWITCH
                          else [F.BY_NAME[n].spellings[0], v])]  # fmt: skip
    assert config(container(args)).fingerprint() == fp(expected)
