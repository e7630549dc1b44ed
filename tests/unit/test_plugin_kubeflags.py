"""`kubectl sps` takes kubectl's connection flags (plugin/kubeflags.py, applied by
plugin/client.py) and completes itself in bash, zsh and kubectl (plugin/completion.py)."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sps_operator.plugin import cli, completion
from sps_operator.plugin.client import Cluster
from sps_operator.plugin.kubeflags import ConnectionFlags, parse_request_timeout


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", None), ("5", 5.0), ("30s", 30.0), ("1m30s", 90.0), ("2h", 7200.0), ("500ms", 0.5)],
)
def test_request_timeout_reads_as_kubectl_does(text: str, seconds: float | None) -> None:
    assert parse_request_timeout(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "1x", "-1s", "1m 30s", "25h", "1s2", "soon"])
def test_request_timeout_refuses_what_kubectl_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="--request-timeout"):
        parse_request_timeout(text)


@given(st.lists(st.tuples(st.integers(0, 500), st.sampled_from(["h", "m", "s", "ms"])), max_size=4))
def test_any_duration_round_trips_and_anything_else_is_a_value_error(
    parts: list[tuple[int, str]],
) -> None:
    text = "".join(f"{n}{u}" for n, u in parts)
    seconds = sum(n * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[u] for n, u in parts)
    if not parts:
        with pytest.raises(ValueError):
            parse_request_timeout(text)
    elif seconds > 24 * 3600:
        with pytest.raises(ValueError, match="at most 24h"):
            parse_request_timeout(text)
    else:
        assert parse_request_timeout(text) == (None if seconds == 0 else pytest.approx(seconds))


@given(st.text(max_size=20))
def test_any_text_parses_or_is_a_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_request_timeout(text)


def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://from-kubeconfig:6443"}}],
                "users": [{"name": "u", "user": {"token": "kubeconfig-token"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}}
                ],
                "current-context": "x",
            }
        )
    )  # fmt: skip
    return path


def request_kwargs(cluster: Cluster) -> dict[str, Any]:
    """What the cluster's next request hands the client besides the request itself."""
    seen: dict[str, Any] = {}

    def call_api(*request: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        raise OSError("not sent")

    cluster.api.call_api = call_api  # type: ignore[method-assign,assignment]
    with pytest.raises(cli.PluginError, match="not sent"):
        cluster.get_profile("ns", "x")
    return seen


def test_the_flags_override_the_kubeconfig(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(
        ["get", "--kubeconfig", str(kubeconfig(tmp_path)), "--server", "https://other:6443/",
         "--token", "flag-token", "--as", "alice", "--request-timeout", "1m",
         "--certificate-authority", "/ca.crt", "--insecure-skip-tls-verify"]
    )  # fmt: skip
    cluster = Cluster(cli.connection_flags(args))
    conf = cluster.api.configuration
    assert conf.host == "https://other:6443"
    assert conf.api_key == {"BearerToken": "Bearer flag-token"}
    # What the client sends: the flag's token, not the kubeconfig's.
    assert conf.auth_settings()["BearerToken"]["value"] == "Bearer flag-token"
    assert conf.ssl_ca_cert == "/ca.crt" and conf.verify_ssl is False
    assert cluster.api.default_headers["Impersonate-User"] == "alice"
    assert cluster.request_timeout == 60.0
    assert cluster.default_namespace == "ns1"
    assert request_kwargs(cluster) == {"_request_timeout": 60.0}


def test_without_flags_the_kubeconfig_decides_and_no_timeout_is_set(tmp_path: Path) -> None:
    cluster = Cluster(ConnectionFlags(kubeconfig=str(kubeconfig(tmp_path))))
    conf = cluster.api.configuration
    assert conf.host == "https://from-kubeconfig:6443"
    assert conf.api_key == {"BearerToken": "Bearer kubeconfig-token"}
    assert "Impersonate-User" not in cluster.api.default_headers
    assert request_kwargs(cluster) == {}


def test_server_and_token_work_without_a_kubeconfig(tmp_path: Path) -> None:
    missing = str(tmp_path / "none")
    cluster = Cluster(ConnectionFlags(kubeconfig=missing, server="https://s:6443", token="t"))
    assert cluster.api.configuration.host == "https://s:6443"
    with pytest.raises(cli.PluginError, match="cannot load a kubeconfig"):
        Cluster(ConnectionFlags(kubeconfig=missing, server="https://s:6443"))


def test_a_bad_request_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["get", "--request-timeout", "soon"])
    assert "a number of seconds or a duration" in capsys.readouterr().err


def test_kubectl_completion_offers_commands_then_their_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = cli.build_parser()
    assert completion.candidates(parser, ["re"]) == ["reprofile"]
    assert "completion" in completion.candidates(parser, [""])
    assert completion.candidates(parser, ["get", "--req"]) == ["--request-timeout"]
    assert "--value" in completion.candidates(parser, ["reprofile", "llama", "--"])
    # Hidden flags stay hidden.
    assert "--watch-timeout" not in completion.candidates(parser, ["get", "--"])
    cli.kubectl_complete(["table", "--pl"])
    assert capsys.readouterr().out == "--plot\n:4\n"


@pytest.mark.parametrize(
    ("line", "wanted"),
    [("kubectl-sps ex", {"explain", "export"}), ("kubectl-sps get --as", {"--as"}),
     ("kubectl-sps table x --r", {"--rejected", "--request-timeout"})],
)  # fmt: skip
def test_the_bash_script_completes_in_bash(
    capsys: pytest.CaptureFixture[str], line: str, wanted: set[str]
) -> None:
    assert cli.main(["completion", "bash"]) == 0  # no cluster needed
    script = capsys.readouterr().out
    words = line.split(" ")
    probe = (
        f"{script}\nCOMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}\n"
        "_kubectl_sps; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert set(done.stdout.split()) == wanted


def test_the_zsh_script_is_the_bash_one_behind_bashcompinit(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["completion", "zsh"]) == 0
    script = capsys.readouterr().out
    assert "bashcompinit" in script and "complete -F _kubectl_sps kubectl-sps" in script
