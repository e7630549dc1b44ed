"""A container's environment and `$(VAR)` expansion, as the kubelet does them (issue 18,
item 10): the fingerprint must see a model or a cost flag chosen through the environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.controller.kube.envsources import EnvSources, read_env_config_maps
from sps_operator.controller.sglang.podenv import (
    MAX_KEYS,
    MAX_VALUE_CHARS,
    ConfigMapEnv,
    EnvValue,
    env_config_maps,
    escape,
    expand,
    resolve_env,
)


def known(mapping: Mapping[str, str]) -> Any:
    return lambda name: EnvValue(mapping[name], "test") if name in mapping else None


def kubelet(text: str, mapping: Mapping[str, str]) -> str:
    return expand(text, known(mapping)).seen


def oracle(text: str, mapping: Mapping[str, str]) -> str:
    """The kubelet's rules said another way (one regular expression, leftmost matches): `$$`
    is `$`; `$(` up to the first `)` is a reference, replaced by its value when defined;
    every other character stands for itself."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return mapping.get(match.group(1), match.group(0))

    return re.sub(r"\$\$|\$\(([^)]*)\)", one, text)


# The cases of Kubernetes' own expansion tests (third_party/forked/golang/expansion),
# restated: VAR_REF's value is itself a reference, which is never expanded again.
K8S = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(VAR_A)", "A"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
        ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),  # a backslash escapes nothing
        ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),  # the name runs to the first )
        ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
        ("$(VAR_REF)", "$(VAR_A)"),  # a value is not expanded again
        ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
        ("foo$(VAR_EMPTY)bar", "foobar"),
        ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),  # unclosed: as written
        ("f00__(VAR_A)__", "f00__(VAR_A)__"),
        ("$?_boo_$!", "$?_boo_$!"),  # the shell's variables are not the kubelet's
        ("$VAR_A", "$VAR_A"),
        ("${VAR_A}", "${VAR_A}"),
        ("$(VAR_DNE)", "$(VAR_DNE)"),  # undefined: as written
        ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
        ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
        ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
        ("$$$$$$$(VAR_A)", "$$$A"),
        ("$VAR_A)", "$VAR_A)"),
        ("$(VAR_B)_______$(A", "B_______$(A"),
        ("$(VAR_C)_______$(", "C_______$("),
        ("$(VAR_A)foobarzab$", "Afoobarzab$"),  # a trailing $ stays
        ("--$($($($($--", "--$($($($($--"),
        ("$($($($($--foo$(", "$($($($($--foo$("),
        ("$(foo$$var)", "$(foo$$var)"),  # no escape inside a name
        ("\n", "\n"),
        ("π$(VAR_A)€$", "πA€$"),
    ],
)
def test_expansion_follows_the_kubelets_rules(text: str, expected: str) -> None:
    assert kubelet(text, K8S) == expected
    assert oracle(text, K8S) == expected


names = st.text(st.sampled_from("AB_$()x"), min_size=1, max_size=4).filter(lambda n: ")" not in n)
texts = st.text(st.sampled_from("$()ABx_\\ é"), max_size=40)
mappings = st.dictionaries(names, st.text(st.sampled_from("$()ABv"), max_size=6), max_size=4)


@given(text=texts, mapping=mappings)
def test_expansion_is_the_kubelets_for_any_text(text: str, mapping: dict[str, str]) -> None:
    assert kubelet(text, mapping) == oracle(text, mapping)


@given(text=texts, mapping=mappings)
def test_an_escaped_text_expands_to_itself(text: str, mapping: dict[str, str]) -> None:
    """`$$` escaping, as the operator writes a known value into the clone's args."""
    assert kubelet(escape(text), mapping) == text


@given(text=texts, mapping=mappings, hidden=st.sets(names, max_size=2))
def test_the_kubelet_form_gives_the_clone_what_the_server_got(
    text: str, mapping: dict[str, str], hidden: set[str]
) -> None:
    """Given to the kubelet in the same environment, the kubelet form expands to what the
    server got; a hidden value stays its reference, shown where it stands."""

    def lookup(name: str) -> EnvValue | None:
        if name in hidden:
            return EnvValue(None, "a Secret")
        return EnvValue(mapping[name], "test") if name in mapping else None

    first = expand(text, lookup)
    again = expand(first.kubelet_form, lookup)
    assert again.seen == first.seen and again.hidden == first.hidden
    for ref in first.hidden:
        assert first.seen[ref.start : ref.end] == f"$({ref.name})" and ref.name in hidden


# --------------------------------------------------------------------------- the environment


def cm(**data: str) -> ConfigMapEnv:
    env = ConfigMapEnv.of({"data": data})
    assert env is not None
    return env


def values(container: dict[str, Any], config_maps: Mapping[str, ConfigMapEnv | None] = {}) -> Any:
    env = resolve_env(container, "serving", config_maps)
    return lambda name: found.value if (found := env.lookup(name)) is not None else "<unset>"


def test_env_values_expand_against_the_entries_before_them() -> None:
    get = values(
        {
            "env": [
                {"name": "LATE_REF", "value": "$(BLU)"},
                {"name": "FOO", "value": "bar"},
                {"name": "ZOO", "value": "$(FOO)-1"},
                {"name": "BLU", "value": "$(ZOO)-2"},
                {"name": "EMPTY", "value": ""},
            ]
        }
    )
    assert (get("FOO"), get("ZOO"), get("BLU")) == ("bar", "bar-1", "bar-1-2")
    assert get("LATE_REF") == "$(BLU)"  # BLU was not defined yet
    assert get("EMPTY") == "" and get("NONE") == "<unset>"


def test_env_wins_over_env_from_and_a_later_source_over_an_earlier_one() -> None:
    container = {
        "envFrom": [
            {"configMapRef": {"name": "base"}},
            {"configMapRef": {"name": "site"}, "prefix": "SITE_"},
            {"configMapRef": {"name": "override"}},
        ],
        "env": [
            {"name": "TP", "value": "8"},
            {"name": "FROM_KEY", "valueFrom": {"configMapKeyRef": {"name": "base", "key": "m"}}},
            {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k",
                                                               "optional": True}}},
        ],
    }  # fmt: skip
    maps = {
        "base": cm(MODEL="llama", TP="2", m="from-key", GONE="kept"),
        "site": cm(MODEL="site-model"),
        "override": cm(MODEL="mistral"),
        "x": None,
    }
    get = values(container, maps)
    assert get("MODEL") == "mistral" and get("SITE_MODEL") == "site-model"
    assert get("TP") == "8" and get("FROM_KEY") == "from-key"
    # An optional reference to a missing ConfigMap sets nothing: envFrom's value stays.
    assert get("GONE") == "kept"


@pytest.mark.parametrize(
    ("value_from", "words"),
    [
        ({"secretKeyRef": {"name": "hf", "key": "model"}}, "Secret 'hf' key 'model'"),
        ({"fieldRef": {"fieldPath": "metadata.name"}}, "the pod's field metadata.name"),
        ({"fieldRef": {"fieldPath": "metadata.labels['model']"}}, "metadata.labels['model']"),
        ({"resourceFieldRef": {"resource": "limits.cpu"}}, "resource limits.cpu"),
        ({"configMapKeyRef": {"name": "models", "key": "name"}}, "does not exist"),
        ({"configMapKeyRef": {"name": "big", "key": "blob"}}, "longer than"),
        ({"configMapKeyRef": {"name": "big", "key": "other"}}, "has no such key"),
        ({"fileKeyRef": {"path": "/x", "key": "k"}}, "does not read"),
    ],
)
def test_what_the_operator_cannot_read_is_hidden_with_the_reason(
    value_from: dict[str, Any], words: str
) -> None:
    maps: dict[str, ConfigMapEnv | None] = {"models": None, "big": cm(blob="x" * 2000)}
    env = resolve_env({"env": [{"name": "V", "valueFrom": value_from}]}, "serving", maps)
    found = env.lookup("V")
    assert found is not None and found.hidden and found.definite and words in found.source


def test_the_pods_namespace_is_known_and_a_secret_from_env_from_may_define_anything() -> None:
    container = {
        "envFrom": [{"secretRef": {"name": "creds"}}, {"secretRef": {"name": "p"}, "prefix": "P_"}],
        "env": [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
    }
    env = resolve_env(container, "serving", {})
    ns = env.lookup("NS")
    assert ns is not None and ns.value == "serving"
    maybe = env.lookup("SGLANG_RAGGED_VERIFY_MODE")
    assert maybe is not None and maybe.hidden and not maybe.definite
    assert "Secret 'creds'" in maybe.source
    assert env.opaque_sources() == ["Secret 'creds'", "Secret 'p'"]


def test_a_configmap_is_kept_bounded() -> None:
    data = {f"k{i:04d}": "v" for i in range(MAX_KEYS + 5)}
    data["k0000"] = "x" * (MAX_VALUE_CHARS + 1)
    kept = ConfigMapEnv.of({"data": data})
    assert kept is not None and not kept.complete
    assert len(kept.values) + len(kept.too_long) == MAX_KEYS
    assert "k0000" in kept.too_long and "k0000" not in kept.values
    # envFrom of an incomplete ConfigMap: a key it did not keep may exist.
    env = resolve_env({"envFrom": [{"configMapRef": {"name": "huge"}}]}, "serving", {"huge": kept})
    beyond = env.lookup(f"k{MAX_KEYS + 2:04d}")
    assert beyond is not None and beyond.hidden
    assert ConfigMapEnv.of(None) is None


def test_the_configmaps_a_pod_spec_reads_env_from() -> None:
    pod_spec = {
        "initContainers": [{"envFrom": [{"configMapRef": {"name": "init"}}]}],
        "containers": [
            {
                "env": [
                    {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "a", "key": "k"}}},
                    {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                ],
                "envFrom": [{"configMapRef": {"name": "b"}}, {"secretRef": {"name": "t"}}],
            }
        ],
        "volumes": [{"name": "v", "configMap": {"name": "mounted"}}],
    }
    assert env_config_maps(pod_spec) == {"init", "a", "b"}


# --------------------------------------------------------------------------- the cache


class _Gets:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects, self.calls = objects, 0

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls += 1
        return self.objects.get((namespace, name))


def _reads(name: str) -> dict[str, Any]:
    env = [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": name, "key": "m"}}}]
    return {"spec": {"template": {"spec": {"containers": [{"name": "s", "env": env}]}}}}


def test_the_cache_reads_a_configmap_once_and_follows_its_events() -> None:
    kube = _Gets({("a", "models"): {"data": {"m": "llama"}}})
    cache = EnvSources()
    first = read_env_config_maps(kube, "a", [_reads("models")], cache)  # type: ignore[arg-type]
    assert first == {"models": cm(m="llama")} and kube.calls == 1
    read_env_config_maps(kube, "a", [_reads("models")], cache)  # type: ignore[arg-type]
    assert kube.calls == 1  # held
    # Another namespace's ConfigMap of the same name is another entry, read on its own.
    other = read_env_config_maps(kube, "b", [_reads("models")], cache)  # type: ignore[arg-type]
    assert other == {"models": None} and kube.calls == 2
    # An event changes what a pass reads; an unreferenced ConfigMap is not kept.
    assert cache.observe("a", "models", {"data": {"m": "mistral"}}, referenced=True)
    assert not cache.observe("a", "models", {"data": {"m": "mistral"}}, referenced=True)
    assert not cache.observe("a", "unrelated", {"data": {"m": "x"}}, referenced=False)
    again = read_env_config_maps(kube, "a", [_reads("models")], cache)  # type: ignore[arg-type]
    assert again == {"models": cm(m="mistral")} and kube.calls == 2 and len(cache) == 2
    assert cache.observe("a", "models", None, referenced=True)  # deleted
    assert read_env_config_maps(kube, "a", [_reads("models")], cache) == {"models": None}  # type: ignore[arg-type]


def test_the_cache_is_bounded() -> None:
    kube = _Gets({})
    cache = EnvSources(max_entries=3)
    for i in range(10):
        cache.read(kube, "a", [f"cm{i}"])  # type: ignore[arg-type]
    assert len(cache) == 3


def test_a_pass_from_the_caches_reads_the_configmaps_its_servers_use() -> None:
    """The operator's own path (a Snapshot from the caches): a change of the ConfigMap
    wakes the profiles selecting its readers, and the next pass reads the changed one from
    the cache."""
    from controller_harness import NS, deployment, indexes_of, profile_body
    from fakekube import FakeKube

    from sps_operator.api.spec import SpsProfileSpec
    from sps_operator.controller import indexes as ix
    from sps_operator.controller.kicks import profiles_selecting
    from sps_operator.controller.kube.builders import ProfileRef
    from sps_operator.controller.passes.state import Snapshot

    kube = FakeKube()
    kube.put({"kind": "ConfigMap", "metadata": {"name": "models"}, "data": {"m": "llama"}})
    reader = kube.put(
        deployment(env=_reads("models")["spec"]["template"]["spec"]["containers"][0]["env"])
    )
    other = kube.put(deployment("other", labels={"app": "other"}))
    profile = kube.put(profile_body())
    cache = EnvSources()
    spec = SpsProfileSpec.model_validate(profile["spec"])
    ref = ProfileRef("p", NS, profile["metadata"]["uid"])

    def world() -> Snapshot:
        return Snapshot(deployments=[reader, other], env_sources=cache)

    assert world().for_profile(kube, ref, spec).env_config_maps == {"models": cm(m="llama")}
    gets = kube.calls.count("get")
    idx = indexes_of([reader, other, profile])
    readers = ix.values(idx.deployments, (ix.ENV, NS, "models"))
    assert [d["metadata"]["name"] for d in readers] == [reader["metadata"]["name"]]
    assert cache.observe(NS, "models", {"data": {"m": "mistral"}}, referenced=True)
    assert profiles_selecting(readers[0], idx.profiles, NS) == [profile["metadata"]["uid"]]
    assert world().for_profile(kube, ref, spec).env_config_maps == {"models": cm(m="mistral")}
    assert kube.calls.count("get") == gets  # from the cache, not the API


def test_an_unreferenced_configmap_event_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ConfigMap event of the cluster reaches the cache: one that no Deployment reads
    is dropped before it is parsed (a tenant's 60,000-key ConfigMap cost ms per event)."""
    parsed: list[object] = []
    monkeypatch.setattr(
        "sps_operator.controller.kube.envsources.ConfigMapEnv.of",
        lambda body: parsed.append(body),
    )
    cache = EnvSources()
    body = {"metadata": {"name": "big"}, "data": {"K": "v"}}
    assert cache.observe("team-b", "big", body, referenced=False) is False
    assert parsed == []
    cache.observe("team-b", "big", body, referenced=True)
    assert parsed == [body]
