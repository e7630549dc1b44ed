"""Cost inputs chosen through the environment (issue 18, item 10).

`--model-path $(MODEL)` with MODEL from a ConfigMap key or an `envFrom` ConfigMap is the
model the server runs: the fingerprint sees it, and switching the model in the ConfigMap
makes the table stale. What the operator cannot read (a Secret, a per-pod field) and that
feeds a cost input is refused with `HiddenCostInput`, naming the reference; the same
reference in a harmless place (`--api-key $(KEY)`) is fine.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from controller_harness import NS, SERVER_ARGS, Harness, container, deployment, profile_body
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.api.reason_registry import TARGET_ADVICE
from sps_operator.api.reasons import (
    HIDDEN_COST_INPUT,
    NOT_A_DSPARK_SERVER,
    NOT_AN_SGLANG_SERVER,
    UNREADABLE_SHELL_SCRIPT,
)
from sps_operator.controller.sglang.podenv import ConfigMapEnv, EnvValue, resolve_env
from sps_operator.controller.sglang.serverconfig import (
    FINGERPRINTED_ENV,
    ServerCommand,
    ServerConfig,
    ServerProblem,
    parse_server,
    server_config,
)
from sps_operator.plugin.explain import explain

MODEL_FROM_ARGS = [a if a != "org/model-8b" else "$(MODEL)" for a in SERVER_ARGS]


def from_config_map(name: str = "models", key: str = "name") -> dict[str, Any]:
    return {"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": name, "key": key}}}


def from_secret() -> dict[str, Any]:
    return {"name": "MODEL", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "model"}}}


def config_map(cm_name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name}, "data": data}


def env_of(c: dict[str, Any], **maps: dict[str, str] | None) -> Any:
    known = {n: ConfigMapEnv.of({"data": d} if d is not None else None) for n, d in maps.items()}
    return resolve_env(c, NS, known)


def parse(c: dict[str, Any], **maps: dict[str, str] | None) -> tuple[ServerCommand, ServerConfig]:
    command = parse_server(c, env_of(c, **maps))
    return command, server_config(c, command)


def refused(c: dict[str, Any], **maps: dict[str, str] | None) -> ServerProblem:
    with pytest.raises(ServerProblem) as info:
        parse(c, **maps)
    return info.value


# --------------------------------------------------------------------------- the parser


def test_a_model_from_a_configmap_is_the_model_in_the_fingerprint() -> None:
    literal = parse(container())[1]
    by_key = container(args=MODEL_FROM_ARGS, env=[from_config_map()])
    _, config = parse(by_key, models={"name": "org/model-8b"})
    assert config.fingerprint() == literal.fingerprint()
    (model,) = [r for r in config.read if r.name == "model_path"]
    assert model.where == "args --model-path, $(MODEL): ConfigMap 'models' key 'name'"
    other = parse(by_key, models={"name": "org/model-70b"})[1]
    assert other.fingerprint() != literal.fingerprint()
    assert other.inputs["model_path"] == "org/model-70b"
    # envFrom, and a cost env var from a ConfigMap key, alike.
    env_from = container(args=MODEL_FROM_ARGS, envFrom=[{"configMapRef": {"name": "site"}}])
    assert parse(env_from, site={"MODEL": "org/model-8b"})[1].fingerprint() == (
        literal.fingerprint()
    )
    mode = {"name": "SGLANG_RAGGED_VERIFY_MODE", "valueFrom": {"configMapKeyRef": {
        "name": "modes", "key": "verify"}}}  # fmt: skip
    static = parse(container(env=[mode]), modes={"verify": "static"})[1]
    compact = parse(container(env=[mode]), modes={"verify": "compact"})[1]
    (verify,) = [r for r in static.read if r.name == "SGLANG_RAGGED_VERIFY_MODE"]
    assert (verify.value, verify.where) == ("static", "env (ConfigMap 'modes' key 'verify')")
    assert static.fingerprint() != compact.fingerprint()


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"env": [from_secret()]}, "Secret 'hf' key 'model'"),
        (
            {"env": [{"name": "MODEL", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
            "metadata.name",
        ),
        ({"envFrom": [{"secretRef": {"name": "everything"}}]}, "Secret 'everything'"),
        ({"env": [from_config_map("missing")]}, "does not exist"),
    ],
)
def test_a_cost_flag_the_operator_cannot_read_is_refused_naming_the_reference(
    changes: dict[str, Any], words: str
) -> None:
    problem = refused(container(args=MODEL_FROM_ARGS, **changes), missing=None)
    assert problem.reason == HIDDEN_COST_INPUT
    assert "--model-path" in str(problem) and "$(MODEL)" in str(problem) and words in str(problem)


@pytest.mark.parametrize(
    "args",
    [
        [*SERVER_ARGS, "$(SECRET)"],  # where a flag would be: it could be any flag
        [*SERVER_ARGS, "--enable-dp-attention", "$(SECRET)"],  # after a switch: a flag too
        [*SERVER_ARGS, "--tp=$(SECRET)"],
        [*SERVER_ARGS, "--tp", "$(SECRET)"],
        [*SERVER_ARGS, "--port", "$(SECRET)"],  # the port the operator probes
        [*SERVER_ARGS, "--speculative-dspark-sps-table-path", "/t/$(SECRET)"],
        [*SERVER_ARGS, "--$(SECRET)", "2"],
        [a if a != "DSPARK" else "$(SECRET)" for a in SERVER_ARGS],
    ],
)
def test_a_hidden_value_where_the_operator_must_read_is_refused(args: list[str]) -> None:
    secret = {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    problem = refused(container(args=args, env=[secret]))
    assert problem.reason == HIDDEN_COST_INPUT and "Secret 's' key 'k'" in str(problem)


def test_a_secret_where_it_changes_no_cost_is_fine_and_reaches_the_clone_as_a_reference() -> None:
    key = {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    args = [*SERVER_ARGS, "--api-key", "$(API_KEY)", "--served-model-name", "a$$b"]
    command, config = parse(container(args=args, env=[key]))
    assert command.argv[-4:] == ("--api-key", "$(API_KEY)", "--served-model-name", "a$b")
    assert command.args[-4:] == ("--api-key", "$(API_KEY)", "--served-model-name", "a$$b")
    assert config.fingerprint() == parse(container())[1].fingerprint()


def test_a_cost_env_var_from_a_secret_is_refused_and_one_a_secret_may_set_is_noted() -> None:
    mode = {"name": "SGLANG_RAGGED_VERIFY_MODE",
            "valueFrom": {"secretKeyRef": {"name": "s", "key": "mode"}}}  # fmt: skip
    problem = refused(container(env=[mode]))
    assert problem.reason == HIDDEN_COST_INPUT and "SGLANG_RAGGED_VERIFY_MODE" in str(problem)
    # envFrom a Secret (an HF token, typically) may or may not set it: not refused, noted.
    _, config = parse(container(envFrom=[{"secretRef": {"name": "hf"}}]))
    assert config.fingerprint() == parse(container())[1].fingerprint()
    assert any("Secret 'hf' (envFrom): may set fingerprinted variables" in u
               for u in config.unfingerprinted)  # fmt: skip


def test_a_shell_script_with_a_hidden_value_cannot_be_read() -> None:
    key = {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
    script = "exec python3 -m sglang.launch_server " + " ".join(SERVER_ARGS) + " --api-key $(KEY)"
    problem = refused(container(command=["sh", "-c", script], args=None, env=[key]))
    assert problem.reason == UNREADABLE_SHELL_SCRIPT and "$(KEY)" in str(problem)


def test_the_clone_runs_the_values_the_fingerprint_was_computed_from() -> None:
    """The clone's args are pinned to the resolved values (in the kubelet's form), so a
    ConfigMap edited after the fingerprint cannot change what the clone measures; a `$` in
    a value stays a `$`."""
    c = container(args=[*MODEL_FROM_ARGS, "--chat-template", "$(TEMPLATE)"], env=[
        from_config_map(), {"name": "TEMPLATE", "value": "t$(NOT_A_VAR)"}])  # fmt: skip
    command, _ = parse(c, models={"name": "org/$(odd)-model"})
    assert command.argv[1] == "org/$(odd)-model"
    assert command.args[1] == "org/$$(odd)-model"
    # `args` is what the clone's container is given (builders.server_sidecar).
    assert command.args[-2:] == ("--chat-template", "t$$(NOT_A_VAR)")


env_entries = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["MODEL", "TP", "SGLANG_RAGGED_VERIFY_MODE", "X"])},
        optional={
            "value": st.sampled_from(["", "m", "$(TP)", "$$(TP)", "8"]),
            "valueFrom": st.sampled_from([
                {"configMapKeyRef": {"name": "models", "key": "name"}},
                {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}},
                {"secretKeyRef": {"name": "s", "key": "k"}},
                {"fieldRef": {"fieldPath": "metadata.namespace"}},
                {"fieldRef": {"fieldPath": "status.podIP"}},
                {},
            ]),
        },
    ),
    max_size=5,
)  # fmt: skip
arg_words = st.lists(
    st.sampled_from(["--model-path", "$(MODEL)", "--tp", "$(TP)", "--api-key", "$(X)", "8",
                     "--speculative-algorithm", "DSPARK", "$$(TP)", "--port", "3000"]),
    max_size=10,
)  # fmt: skip
env_from = st.lists(
    st.sampled_from([{"configMapRef": {"name": "models"}}, {"secretRef": {"name": "s"}},
                     {"configMapRef": {"name": "gone"}, "prefix": "P_"}]),
    max_size=2,
)  # fmt: skip


@given(env=env_entries, args=arg_words, sources=env_from)
def test_any_environment_is_understood_or_refused_with_a_reason(
    env: list[dict[str, Any]], args: list[str], sources: list[dict[str, Any]]
) -> None:
    c = container(args=[*SERVER_ARGS, *args], env=env, envFrom=sources)
    maps: dict[str, Any] = {"models": {"name": "org/m", "MODEL": "org/m2"}, "gone": None}
    try:
        command, config = parse(c, **maps)
    except ServerProblem as exc:
        assert exc.reason in (HIDDEN_COST_INPUT, NOT_AN_SGLANG_SERVER, NOT_A_DSPARK_SERVER) and str(
            exc
        )
        return
    assert config.port > 0 and len(command.args) == len(command.argv)
    # Whatever was accepted does not depend on what the operator cannot read: any values in
    # their place give the same fingerprint. (A cost env var that an envFrom Secret may set
    # is the one gap, reported in `unfingerprinted`.)
    env = env_of(c, **maps)
    prints = set()
    for stand_in in ("one-value", "another"):

        def lookup(name: str, stand_in: str = stand_in) -> EnvValue | None:
            found = env.lookup(name)
            if found is None or not found.hidden:
                return found
            if not found.definite and name in FINGERPRINTED_ENV:
                return found
            return EnvValue(stand_in, "a stand-in")

        stand = SimpleNamespace(lookup=lookup, opaque_sources=env.opaque_sources, names=env.names)
        prints.add(server_config(c, parse_server(c, stand)).fingerprint())  # type: ignore[arg-type]
    assert prints == {config.fingerprint()}


# --------------------------------------------------------------------------- whole passes


def env_harness(**server: Any) -> Harness:
    """A Deployment whose model comes from ConfigMap `models`, selected by profile p."""
    h = Harness()
    h.add(config_map("models", name="org/model-8b"))
    h.add(deployment(args=MODEL_FROM_ARGS, **server))
    h.add(profile_body())
    h.place()
    return h


def test_switching_the_model_in_a_configmap_makes_the_table_stale() -> None:
    """The bug: `--model-path $(MODEL)` was fingerprinted as the text `$(MODEL)`, so after
    the ConfigMap switched the model the old model's table stayed live and not Stale."""
    h = env_harness(env=[from_config_map()])
    status = h.profile_once()
    assert status["targets"][0]["state"] == "Live", status
    before = status["targets"][0]["fingerprint"]
    h.kube.edit("ConfigMap", "models", lambda c: c["data"].update(name="org/model-70b"))
    h.tick()
    status = h.run_pass()
    target = status["targets"][0]
    assert target["fingerprint"] != before and target["state"] != "Live"
    assert status["currentRun"]["fingerprint"] == target["fingerprint"]
    assert h.condition("Ready")[0] == "False"
    # The new run's clone runs the new model.
    job = h.kube.obj("Job", status["currentRun"]["job"])
    server = job["spec"]["template"]["spec"]["initContainers"][0]
    assert server["args"][server["args"].index("--model-path") + 1] == "org/model-70b"


def test_envfrom_a_configmap_is_resolved_too() -> None:
    h = env_harness(envFrom=[{"configMapRef": {"name": "site"}}])
    h.add(config_map("site", MODEL="org/model-8b"))
    status = h.profile_once()
    assert status["targets"][0]["state"] == "Live"
    h.kube.edit("ConfigMap", "site", lambda c: c["data"].update(MODEL="org/model-70b"))
    h.tick()
    assert h.run_pass()["targets"][0]["state"] != "Live"


def test_a_model_from_a_secret_is_refused_and_explained() -> None:
    h = env_harness(env=[from_secret()])
    status = h.settle()
    (target,) = status["targets"]
    assert target["state"] == "Refused" and target["reason"] == HIDDEN_COST_INPUT
    assert "Secret 'hf' key 'model'" in target["message"]
    assert status.get("currentRun") is None and not h.kube.kinds("Job")
    assert HIDDEN_COST_INPUT in TARGET_ADVICE
    body = h.kube.obj("SpsProfile", "p")
    findings = explain(body)["findings"]
    assert any(HIDDEN_COST_INPUT in f["why"] and "ConfigMap" in f["next"] for f in findings)
