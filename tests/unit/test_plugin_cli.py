"""`kubectl sps` command line: parsing, local-file diff, plots, clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pytest
import yaml

from sps_operator.plot import plot_table
from sps_operator.plugin import cli
from sps_operator.plugin.client import Cluster
from sps_operator.tables.formats import SpsAdditiveCostTable, SpsCostTable

DIAG = '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[1000.0,500.0],"max_batch_tokens":32}'
DIAG2 = '{"sample_batch_tokens":[8,16],"sample_steps_per_sec":[800.0,500.0],"max_batch_tokens":32}'


def test_parser_accepts_every_command_with_output_flag() -> None:
    parser = cli.build_parser()
    args = parser.parse_args(["table", "llama", "--gpu", "NVIDIA-H200", "-o", "yaml", "-n", "x"])
    assert (args.command, args.name, args.gpu, args.output, args.namespace) == (
        "table",
        "llama",
        "NVIDIA-H200",
        "yaml",
        "x",
    )
    assert parser.parse_args(["get", "-A", "-w"]).all_namespaces is True
    assert parser.parse_args(["reprofile", "llama", "--value", "t1"]).value == "t1"
    assert parser.parse_args(["export", "llama", "--name", "pinned"]).new_name == "pinned"
    # kubectl's -o wide and name for get; the other commands refuse them.
    for output in ("wide", "name", "json"):
        assert parser.parse_args(["get", "-o", output]).output == output
    for command, output in (["table", "wide"], ["explain", "name"], ["get", "jsonpath"]):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "x", "-o", output] if command != "get" else
                              [command, "-o", output])  # fmt: skip
    assert set(cli.COMMANDS) == {
        "get", "table", "diff", "export", "reprofile", "explain", "version", "completion"
    }  # fmt: skip


def test_diff_of_local_files_needs_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.json").write_text(DIAG)
    (tmp_path / "b.json").write_text(DIAG2)
    args = ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-o", "json"]
    assert cli.main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"]["largestChange"] == pytest.approx(0.25)  # 1.0 ms -> 1.25 ms at M=8
    assert cli.main([*args[:3], "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["summary"]["points"] == 2


def test_diff_of_a_bad_table_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.json").write_text(DIAG)
    (tmp_path / "bad.json").write_text(DIAG.replace("[8,16]", "[8.0,16]"))
    assert cli.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "bad.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "bad.json is not a table SGLang would load" in err
    assert "int" in err
    assert cli.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_missing_kubeconfig_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert cli.main(["get", "--kubeconfig", str(tmp_path / "nope")]) == 1
    assert "cannot load a kubeconfig" in capsys.readouterr().err


def test_watch_rows_prints_only_changes() -> None:
    states = iter(["Pending", "Profiling/Diagonal", "Profiling/Diagonal", "Ready"])

    def snapshot() -> list[dict[str, str]]:
        state = next(states)
        return [
            {
                "namespace": "ns",
                "name": "p",
                "kind": "Diagonal",
                "gpu": "G",
                "table": "<none>",
                "state": state,
                "progress": "-",
                "age": "1s",
            }
        ]

    lines: list[str] = []
    rows = cli.watch_rows(
        snapshot, False, 0.0, until=lambda r: r[0]["state"] == "Ready", out=lines.append
    )
    assert [line.split()[4] for line in lines] == ["Profiling/Diagonal", "Ready"]
    assert rows[0]["state"] == "Ready"


@pytest.mark.parametrize(
    "table",
    [
        SpsCostTable([8, 16, 32], [1000.0, 500.0, 260.0], 64),
        SpsAdditiveCostTable(0.01, [1, 8, 16], [0.0, 0.001, 0.002], [0, 64], [0.0, 0.004]),
    ],
    ids=["diagonal", "additive"],
)
def test_plot_writes_a_png(tmp_path: Path, table: SpsCostTable | SpsAdditiveCostTable) -> None:
    out = plot_table(table, tmp_path / "sub" / "t.png", "title")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000


def test_diagonal_fit_plot_with_cells(tmp_path: Path) -> None:
    from sps_operator.plot import plot_diagonal_fit
    from sps_operator.tables.quality import Cell

    table = SpsCostTable([8, 16, 32], [1000.0, 500.0, 260.0], 64)
    cells = [Cell(1, 8, 0.00101, 0.00001), Cell(2, 16, 0.00199), Cell(4, 32, 0.0039)]
    out = plot_diagonal_fit(table, cells, tmp_path / "fit.png", "t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Issue 18 #24: what a table file or a table ConfigMap may hold that json.loads or float()
# turn into a RecursionError, a bare ValueError or an OverflowError.
HOSTILE_TABLES = {
    "nested": ("[" * 100_000 + "]" * 100_000).encode(),
    "5000 digits": DIAG.replace("[8,16]", "[8," + "1" * 5000 + "]").encode(),
    "too large for a double": DIAG.replace("1000.0", "1" + "0" * 400).encode(),
    "not UTF-8": b"\xff\xfe{" + DIAG.encode(),
}


@pytest.mark.parametrize("content", HOSTILE_TABLES.values(), ids=HOSTILE_TABLES.keys())
def test_diff_of_hostile_json_is_refused_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    (tmp_path / "a.json").write_text(DIAG)
    (tmp_path / "bad.json").write_bytes(content)
    assert cli.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "bad.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.json is not" in err
    assert "Traceback" not in err and len(err) < 400


class OneTableCluster:
    """What `kubectl sps table` reads: a profile with one live table, and its ConfigMap."""

    default_namespace = "serving"

    def __init__(self, table_text: str) -> None:
        self.table_text = table_text

    def get_profile(self, namespace: str, name: str) -> dict[str, object]:
        entry = {"gpuProduct": "NVIDIA-H100-80GB-HBM3", "configMap": "p-table"}
        return {"metadata": {"name": name}, "status": {"tables": [entry]}}

    def get_config_map(self, namespace: str, name: str) -> dict[str, object]:
        return {"metadata": {"name": name}, "data": {"table.json": self.table_text}}


@pytest.mark.parametrize(
    "content",
    [v for k, v in HOSTILE_TABLES.items() if k != "not UTF-8"],
    ids=list(HOSTILE_TABLES)[:3],
)
def test_table_of_a_hostile_config_map_is_refused_without_a_traceback(
    capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    args = cli.build_parser().parse_args(["table", "p"])
    with pytest.raises(cli.PluginError, match="ConfigMap p-table holds no table SGLang would load"):
        cli.cmd_table(args, OneTableCluster(content.decode()))
    assert cli.cmd_table(args, OneTableCluster(DIAG)) == 0
    assert "1000" in capsys.readouterr().out


class ExportCluster:
    """What `kubectl sps export` reads: a profile whose table this version measured and
    labelled with its server's version-1 key for 0.1.0 (the status as the operator writes
    it, with the version-1 twin entry), and that table's ConfigMap."""

    default_namespace = "serving"
    v1_key = "0123456789abcdef"
    measured = "v2-fedcba9876543210"

    def get_profile(self, namespace: str, name: str) -> dict[str, object]:
        entry = {
            "gpuProduct": "NVIDIA-H100-80GB-HBM3",
            "fingerprint": self.measured,
            "configMap": "p-table",
            "hash": "0a1b2c3d4e5f6789",
            "adoptedFrom": self.v1_key,
        }
        twin = {**entry, "fingerprint": self.v1_key}
        del twin["adoptedFrom"]
        return {"metadata": {"name": name}, "status": {"tables": [entry, twin]}}

    def get_config_map(self, namespace: str, name: str) -> dict[str, object]:
        meta = {"fingerprint": self.measured, "gpuProduct": "NVIDIA-H100-80GB-HBM3"}
        return {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "sps.dev/fingerprint": self.v1_key,
                    "sps.dev/table-hash": "0a1b2c3d4e5f6789",
                },
            },
            "data": {"table.json": DIAG, "meta.json": json.dumps(meta)},
        }


def test_export_of_a_table_labelled_for_0_1_0_records_the_measured_fingerprint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = cli.build_parser().parse_args(["export", "p"])
    assert cli.cmd_export(args, cast("Cluster", ExportCluster())) == 0
    manifest = yaml.safe_load(capsys.readouterr().out)
    annotations = manifest["metadata"]["annotations"]
    assert annotations["sps.dev/fingerprint"] == ExportCluster.measured
    assert annotations["sps.dev/exported-from"] == "serving/p-table"
    assert ExportCluster.v1_key not in yaml.safe_dump(manifest["metadata"])
