"""The fingerprint's declared list (issue 20 §1): every input counts alone, every spelling
SGLang accepts is read, version-bound inputs count where SGLang reads them, what looks like
a cost input but is not in the list is reported, and the doc is the list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api import fingerprint as F
from sps_operator.api.fingerprint import Kind, Position, Where
from sps_operator.api.reasons import (
    AMBIGUOUS_FLAG,
    CONFIG_FILE_FLAGS,
    HIDDEN_COST_INPUT,
    NOT_A_DSPARK_SERVER,
    NOT_AN_SGLANG_SERVER,
    UNREADABLE_SHELL_SCRIPT,
)
from sps_operator.controller.fingerprint_cmd import with_doc
from sps_operator.controller.sglang.podenv import ConfigMapEnv, resolve_env
from sps_operator.controller.sglang.serverchanges import server_changes
from sps_operator.controller.sglang.serverconfig import (
    ServerConfig,
    ServerProblem,
    legacy_table_fingerprint,
    parse_server,
    server_config,
    table_fingerprint,
)

ROOT = Path(__file__).resolve().parents[2]
BASE = ["--model-path", "org/m", "--speculative-algorithm", "DSPARK",
        "--speculative-dspark-block-size", "3", "--port", "30000"]  # fmt: skip
# Pinned, but naming no release: every version-bound input counts.
UNKNOWN_IMAGE = "registry.local/sglang@sha256:" + "c" * 64


def container(args: list[str] | None = None, env: dict[str, str] | None = None,
              image: str = UNKNOWN_IMAGE) -> dict[str, Any]:  # fmt: skip
    return {
        "name": "sglang",
        "image": image,
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": [*BASE, *(args or [])],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }


def config(c: dict[str, Any], version: str | None = None) -> ServerConfig:
    return server_config(c, parse_server(c), version)


def fp(args: list[str] | None = None, env: dict[str, str] | None = None, **kw: Any) -> str:
    return config(container(args, env, **kw)).fingerprint()


def other_value(entry: F.CostInput) -> str:
    if entry.kind == Kind.BOOL:
        return "false" if entry.default == "true" else "true"
    return "cap-accept" if entry.name == "SGLANG_RAGGED_VERIFY_MODE" else "7"


def set_alone(entry: F.CostInput, spelling: str | None = None) -> dict[str, Any]:
    """A container that differs from the base in `entry` only."""
    if entry.where == Where.IMAGE:
        return container(image="registry.local/sglang@sha256:" + "d" * 64)
    if entry.where == Where.ENV:
        return container(env={entry.name: other_value(entry)})
    flag = spelling or entry.spellings[0]
    base_value = {"speculative_algorithm": None, "model_path": "org/other",
                  "speculative_dspark_block_size": "5"}.get(entry.name, "7")  # fmt: skip
    if entry.name == "speculative_algorithm":
        return container(args=[flag, "DSPARK"])  # written twice: the last one wins, DSPARK
    if entry.kind == Kind.SWITCH:
        return container(args=[flag])
    if entry.kind == Kind.LIST:
        return container(args=[flag, "1", "2", "7"])
    return container(args=[flag, str(base_value)])


FINGERPRINTED = [e for e in F.COST_INPUTS if e.fingerprinted and e.name != "speculative_algorithm"]


@pytest.mark.parametrize("entry", FINGERPRINTED, ids=lambda e: e.name)
def test_each_input_changed_alone_changes_the_fingerprint(entry: F.CostInput) -> None:
    changed = config(set_alone(entry))
    assert changed.fingerprint() != fp(), entry.name
    # ... under every spelling SGLang accepts, alike.
    for spelling in entry.spellings[1:] if entry.where == Where.ARGS else ():
        assert config(set_alone(entry, spelling)).fingerprint() == changed.fingerprint()
    # A spelling is read as the flag (an entry is never silently a no-op).
    assert entry.name in changed.inputs or entry.where == Where.IMAGE


@pytest.mark.parametrize("entry", [e for e in F.COST_INPUTS if not e.fingerprinted],
                         ids=lambda e: e.name)  # fmt: skip
def test_what_is_not_a_step_cost_is_read_but_changes_nothing(entry: F.CostInput) -> None:
    changed = config(set_alone(entry))
    assert changed.fingerprint() == fp()
    assert not changed.unfingerprinted  # known: never reported as a gap
    assert any(r.name == entry.name and not r.counted for r in changed.read)


def test_the_injected_table_path_and_harmless_flags_change_nothing() -> None:
    assert fp(["--speculative-dspark-sps-table-path", "/etc/sps/table/table.json",
               "--host", "0.0.0.0", "--log-level", "debug"]) == fp()  # fmt: skip


# --------------------------------------------------------------------------- spellings


def test_list_flags_count_with_every_value() -> None:
    """The bug: `--cuda-graph-bs-decode 1 2 4 8` was read as "1", so changing the rest of
    the capture list never reprofiled."""
    a = fp(["--cuda-graph-bs-decode", "1", "2", "4", "8"])
    assert a != fp(["--cuda-graph-bs-decode", "1", "2", "4", "16"])
    assert a == fp(["--cuda-graph-bs", "1", "2", "4", "8"])  # the deprecated alias
    assert fp(["--lora-paths", "a", "b", "--enable-dp-attention"]) != fp(
        ["--lora-paths", "a", "--enable-dp-attention"]
    )


def test_the_draft_model_alias_is_the_draft_model() -> None:
    """The bug: `--speculative-draft-model` (SGLang's alias) was not read at all."""
    a = fp(["--speculative-draft-model", "org/draft-a"])
    assert a != fp(["--speculative-draft-model", "org/draft-b"])
    assert a == fp(["--speculative-draft-model-path", "org/draft-a"])


@pytest.mark.parametrize(
    ("abbreviation", "full"),
    [
        (["--max-running", "64"], ["--max-running-requests", "64"]),
        (["--tp", "2"], ["--tp-size", "2"]),
        (["--dp=2"], ["--dp-size", "2"]),
        (["--page", "16"], ["--page-size", "16"]),
        (
            ["--speculative-dspark-align"],
            ["--speculative-dspark-align-verify-tokens-to-graph-tier"],
        ),
    ],
)
def test_unambiguous_prefixes_are_read_as_argparse_reads_them(
    abbreviation: list[str], full: list[str]
) -> None:
    """The bug: SGLang's parser takes any unambiguous prefix (allow_abbrev) and the
    operator read only a few hand-listed ones (`--max-running 64` changed nothing)."""
    assert fp(abbreviation) == fp(full) != fp()
    where = next(
        r.where for r in config(container(abbreviation)).read if r.label == full[0].split("=")[0]
    )
    assert "abbreviation of" in where


@pytest.mark.parametrize("flag", ["--cuda-graph-b", "--moe-d", "--speculative-draft-model-"])
def test_a_prefix_of_several_flags_is_refused(flag: str) -> None:
    with pytest.raises(ServerProblem) as info:
        fp([flag, "4"])
    assert info.value.reason == AMBIGUOUS_FLAG and "write the flag in full" in str(info.value)


@pytest.mark.parametrize("args", [["--config", "/etc/sglang.yaml"], ["--config=/x.yaml"],
                                  ["--conf", "/x.yaml"]])  # fmt: skip
def test_flags_from_a_config_file_are_refused(args: list[str]) -> None:
    """The bug: every cost flag in a `--config` file was invisible to the fingerprint."""
    with pytest.raises(ServerProblem) as info:
        fp(args)
    assert info.value.reason == CONFIG_FILE_FLAGS and "container's args" in str(info.value)


def test_env_switches_are_read_as_sglang_reads_them() -> None:
    on = fp(env={"SGLANG_DSPARK_FOLDED_PROPOSAL": "0"})
    assert on != fp()
    assert fp(env={"SGLANG_DSPARK_FOLDED_PROPOSAL": "false"}) == on
    assert fp(env={"SGLANG_DSPARK_FOLDED_PROPOSAL": "NO"}) == on
    # Its default, in any spelling, and a value SGLang does not accept (it warns and
    # takes the default), are the server without it.
    for same in ("1", "True", "y", "maybe"):
        assert fp(env={"SGLANG_DSPARK_FOLDED_PROPOSAL": same}) == fp(), same
    assert fp(env={"SGLANG_RAGGED_VERIFY_MODE": "static"}) == fp()
    assert fp(env={"SGLANG_SCHEDULER_SKIP_ALL_GATHER": "1"}) != fp()  # default false


# --------------------------------------------------------------------------- versions


PREP, PROPOSAL, SAMPLING = (
    "SGLANG_PREP_IN_CUDA_GRAPH",
    "SGLANG_DSPARK_FOLDED_PROPOSAL",
    "SGLANG_DSPARK_FOLDED_SAMPLING",
)


@pytest.mark.parametrize(
    ("image", "counted"),
    [
        ("lmsysorg/sglang:v0.5.16", {PREP}),
        ("lmsysorg/sglang:v0.5.17-cu129", {PREP, SAMPLING}),
        ("docker.io/lmsysorg/sglang:v0.5.18", {PROPOSAL, SAMPLING}),
        ("mirror.corp:5000/ml/sglang:0.5.19", {PROPOSAL, SAMPLING}),
        ("lmsysorg/sglang:latest", {PREP, PROPOSAL, SAMPLING}),
        ("myorg/sglang-fork:v0.5.16", {PREP, PROPOSAL, SAMPLING}),
        ("lmsysorg/sglang@sha256:" + "a" * 64, {PREP, PROPOSAL, SAMPLING}),
    ],
)
def test_version_bound_inputs_count_only_where_sglang_reads_them(
    image: str, counted: set[str]
) -> None:
    bound = {PREP: "0", PROPOSAL: "0", SAMPLING: "2"}
    cfg = config(container(env=bound, image=image))
    assert set(cfg.inputs) & set(bound) == counted
    for item in cfg.read:
        if item.name in bound and item.name not in counted:
            assert "SGLang reads it only" in item.note and "this server is" in item.note
    # A needless reprofile avoided: on v0.5.18 the deleted switch changes nothing.
    if image.endswith(":v0.5.18"):
        assert (
            config(container(image=image)).fingerprint()
            == config(container(env={"SGLANG_PREP_IN_CUDA_GRAPH": "0"}, image=image)).fingerprint()
        )


@pytest.mark.parametrize(
    ("stated", "release", "position"),
    [
        ("0.5.17", (0, 5, 17), Position.EXACT),
        ("v0.5.18.dev4", (0, 5, 18), Position.BEFORE),
        ("0.5.18rc1", (0, 5, 18), Position.BEFORE),
        ("0.5.17.post1", (0, 5, 17), Position.AFTER),
        ("0.5.17+g1a2b3c4", (0, 5, 17), Position.AFTER),
        ("0.0.0.dev0", None, Position.EXACT),
        ("unknown", None, Position.EXACT),
    ],
)
def test_a_stated_version_wins_over_the_tag(
    stated: str, release: tuple[int, int, int] | None, position: Position
) -> None:
    version = config(container(image="lmsysorg/sglang:v0.5.16"), stated).version
    assert version.release == release
    if release is not None:
        assert version.position == position and "spec.server.sglangVersion" in version.source


@pytest.mark.parametrize(
    ("version", "since", "until", "counts"),
    [
        ("0.5.17", "0.5.18", None, False),
        ("0.5.18", "0.5.18", None, True),
        ("0.5.18.dev3", "0.5.18", None, True),  # may or may not carry it
        ("0.5.17.dev3", "0.5.18", None, False),  # before 0.5.17: certainly not
        ("0.5.17+gabc", "0.5.18", None, True),  # a build on top of 0.5.17 may carry it
        ("0.5.17", None, "0.5.18", True),
        ("0.5.18", None, "0.5.18", False),
        ("0.5.18.dev3", None, "0.5.18", True),
        ("0.5.19.dev1", None, "0.5.18", False),
        ("0.5.18+gabc", None, "0.5.18", False),
    ],
)
def test_matters_by_release(
    version: str, since: str | None, until: str | None, counts: bool
) -> None:
    entry = F.CostInput("X", Where.ENV, "why", since=since, until=until)
    assert F.matters(entry, F.parse_version(version, "test")) is counts
    assert F.matters(entry, F.ServerVersion(None)) is True  # unknown: always


# --------------------------------------------------------------------------- gaps


def test_cost_looking_inputs_outside_the_list_are_reported_once() -> None:
    cfg = config(container(["--speculative-dspark-new-knob", "2", "--moe-new", "x",
                            "--speculative-dspark-new-knob", "3", "--log-level", "info"],
                           env={"SGLANG_DSPARK_NEW": "1", "HF_HOME": "/x"}))  # fmt: skip
    assert cfg.unfingerprinted == (
        "--speculative-dspark-new-knob (args): looks like a cost input, not in the fingerprint",
        "--moe-new (args): looks like a cost input, not in the fingerprint",
        "SGLANG_DSPARK_NEW (env): looks like a cost input, not in the fingerprint",
    )
    assert cfg.fingerprint() == fp()  # reported, not counted


def test_a_moving_image_tag_is_reported_and_a_digest_or_release_tag_is_not() -> None:
    assert any(
        "a tag that moves" in u
        for u in config(container(image="lmsysorg/sglang:latest")).unfingerprinted
    )
    assert any(
        "a tag that moves" in u for u in config(container(image="lmsysorg/sglang")).unfingerprinted
    )
    for pinned in ("lmsysorg/sglang:v0.5.17", "lmsysorg/sglang:latest@sha256:" + "b" * 64):
        assert not config(container(image=pinned)).unfingerprinted  # fmt: skip


# --------------------------------------------------------------------------- the doc


def test_the_doc_is_the_list() -> None:
    doc = (ROOT / "docs" / "fingerprint.md").read_text()
    assert doc == with_doc(doc), (
        "run: .venv/bin/sps-operator fingerprint --write-doc docs/fingerprint.md"
    )
    for entry in F.COST_INPUTS:
        assert f"`{entry.name if entry.fingerprinted else entry.label}`" in doc


def test_the_list_is_consistent() -> None:
    names = [e.name for e in F.COST_INPUTS]
    assert len(names) == len(set(names))
    spellings = [s for e in F.COST_INPUTS if e.where == Where.ARGS for s in e.spellings]
    assert len(spellings) == len(set(spellings))
    for entry in F.COST_INPUTS:
        assert entry.why
        if entry.since and entry.until:
            assert F.parse_release(entry.since) < F.parse_release(entry.until)
        if entry.where == Where.ARGS:
            assert entry.spellings[0] == "--" + entry.name.replace("_", "-")


# --------------------------------------------------------------------------- upgrade


def test_the_version_1_function_is_frozen() -> None:
    """Values computed by the operator before issue 20 (main at 607abfa): the upgrade
    path compares with them, so they must never change."""
    c = {
        "name": "sglang",
        "image": "lmsysorg/sglang:v0.5.16",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "deepseek/v4", "--tp", "2", "--speculative-algorithm", "DSPARK",
                 "--speculative-dspark-block-size", "7", "--cuda-graph-max-bs", "64",
                 "--max-running-requests", "48", "--port", "30001", "--host", "0.0.0.0",
                 "--cuda-graph-bs", "1", "2", "4", "--enable-dp-attention"],
        "env": [{"name": "SGLANG_RAGGED_VERIFY_MODE", "value": "compact"},
                {"name": "SGLANG_PREP_IN_CUDA_GRAPH", "value": "0"}],
    }  # fmt: skip
    cfg = config(c)
    assert cfg.legacy_fingerprint() == "b6224d1c0c374ead"
    table = {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4]}}
    assert legacy_table_fingerprint(cfg, table) == "9201b8fde7ad7619"
    assert table_fingerprint(cfg, table).startswith("v2-")


def test_the_version_1_function_is_frozen_over_what_the_server_gets() -> None:
    """Version 1 hashed the values after `$(VAR)` expansion and ConfigMap resolution
    (main at m-cap, podenv): values computed by that code, for a server whose cost inputs
    come from a ConfigMap key, envFrom and a literal variable (a Secret only where no cost
    is read)."""
    c = {
        "name": "sglang", "image": "lmsysorg/sglang:v0.5.17",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "$(MODEL)", "--tp-size", "2", "--speculative-algorithm",
                 "DSPARK", "--speculative-dspark-block-size=$(K)", "--attention-backend",
                 "$(ATTN)", "--port", "30001", "--api-key", "$(KEY)"],
        "env": [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "site",
                                                                     "key": "model"}}},
                {"name": "K", "value": "5"},
                {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "SGLANG_PREP_IN_CUDA_GRAPH",
                 "valueFrom": {"configMapKeyRef": {"name": "site", "key": "prep"}}}],
        "envFrom": [{"configMapRef": {"name": "modes"}}],
    }  # fmt: skip
    maps = {
        "site": ConfigMapEnv.of({"data": {"model": "org/m-8b", "prep": "0"}}),
        "modes": ConfigMapEnv.of({"data": {"SGLANG_RAGGED_VERIFY_MODE": "compact", "ATTN": "fa3"}}),
    }
    cfg = server_config(c, parse_server(c, resolve_env(c, "ns", maps)))
    assert cfg.legacy_fingerprint() == "04359a37e13db268"
    table = {"kind": "Diagonal", "sweep": {"batchSizes": [1, 2, 4]}}
    assert legacy_table_fingerprint(cfg, table) == "e96a60c275ced0c3"


def test_what_changed_is_said_in_the_fingerprint_command_s_words() -> None:
    before = config(container(["--tp", "2"], env={"SGLANG_DSPARK_FOLDED_PROPOSAL": "0"},
                              image="lmsysorg/sglang:v0.5.17"))  # fmt: skip
    after = config(container(["--tp", "4"], env={"SGLANG_DSPARK_FOLDED_PROPOSAL": "0"},
                             image="lmsysorg/sglang:v0.5.18"))  # fmt: skip
    assert server_changes(before.describe(), after) == [
        "image: lmsysorg/sglang:v0.5.17 -> lmsysorg/sglang:v0.5.18",
        "--tp-size: 2 -> 4",
        "SGLANG_DSPARK_FOLDED_PROPOSAL: 0 (not counted) -> 0",
    ]
    # A table of fingerprint version 1 is compared on what version 1 read.
    assert server_changes(before.legacy, after) == [
        "image: lmsysorg/sglang:v0.5.17 -> lmsysorg/sglang:v0.5.18",
        "tp: 2 -> 4",
    ]
    assert server_changes(None, after) == []


# --------------------------------------------------------------------------- any input

WORDS = ["--tp", "--tp-size", "2", "--cuda-graph-bs", "1", "4", "--enable-dp-attention",
         "--mo", "--max-running", "--conf", "x", "--speculative-x", "--", "-1", "--port",
         "=", "--dp=", "--page-size=8", "--lora-paths", "--log-level"]  # fmt: skip


@given(args=st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=12)), max_size=12),
       env=st.dictionaries(st.sampled_from(["SGLANG_DSPARK_FOLDED_PROPOSAL", "SGLANG_DSPARK_Z",
                                            "SGLANG_RAGGED_VERIFY_MODE", "X"]),
                           st.text(max_size=6), max_size=3))  # fmt: skip
def test_any_command_line_is_read_or_refused_with_a_reason(
    args: list[str], env: dict[str, str]
) -> None:
    c = container(args, env)
    try:
        cfg = config(c)
    except ServerProblem as exc:
        assert exc.reason in (AMBIGUOUS_FLAG, CONFIG_FILE_FLAGS, HIDDEN_COST_INPUT,
                              NOT_A_DSPARK_SERVER, NOT_AN_SGLANG_SERVER,
                              UNREADABLE_SHELL_SCRIPT) and str(exc)  # fmt: skip
        return
    assert cfg.fingerprint().startswith("v2-") and len(cfg.unfingerprinted) <= 16
    # A flag the operator does not read, appended, changes nothing.
    assert config(container([*args, "--log-level", "info"], env)).fingerprint() == cfg.fingerprint()
