"""The tracker flags: refused in one line without their extra, nothing imported unless asked,
and ``health-check`` logging its report into an existing MLflow or W&B run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from sidecar.cli import main
from tests.sidecar.export.trackers.conftest import MlflowServer, wandb_run_dirs
from tests.sidecar.export.trackers.wandb_records import read_run
from tests.sidecar.service_support import generate_run

_BLOCKED = "import sys\nfor name in ('mlflow', 'wandb'):\n    sys.modules[name] = None\n"


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=False
    )


class TestWithoutTheExtras:
    def test_the_service_imports_neither_library(self, tmp_path: Path) -> None:
        code = (
            "import sys\n"
            "import sidecar.http.server, sidecar.http.service, sidecar.http.app, sidecar.http.cli\n"
            "import sidecar.export.trackers\n"
            "import sidecar.export.trackers.export, sidecar.export.trackers.cli\n"
            "from sidecar.cli import build_parser\n"
            "build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlflow', 'wandb')))\n"
        )
        completed = _python(code, tmp_path)
        assert completed.returncode == 0, completed.stderr
        assert completed.stdout.strip().splitlines()[-1] == "[]"

    @pytest.mark.parametrize(
        ("flags", "extra"),
        [
            (["--mlflow-tracking-uri", "http://127.0.0.1:1"], "mlflow"),
            (["--mlflow-experiment", "e"], "mlflow"),
            (["--wandb-project", "p"], "wandb"),
        ],
    )
    def test_serve_flag_without_its_extra_is_one_line_and_exit_2(
        self, tmp_path: Path, flags: list[str], extra: str
    ) -> None:
        argv = ["serve", "--port", "0", "--journal", str(tmp_path / "j.sqlite3"), *flags]
        completed = _python(_BLOCKED + f"from sidecar.cli import main\nsys.exit(main({argv!r}))\n", tmp_path)
        assert completed.returncode == 2
        assert completed.stderr.count("\n") == 1
        assert f"pip install '.[{extra}]' in the rollout-sidecar clone" in completed.stderr
        assert not (tmp_path / "j.sqlite3").exists()

    def test_health_check_flag_without_its_extra_is_one_line_and_exit_2(self, tmp_path: Path) -> None:
        argv = ["health-check", str(tmp_path), "--wandb-run-path", "p/abc"]
        completed = _python(_BLOCKED + f"from sidecar.cli import main\nsys.exit(main({argv!r}))\n", tmp_path)
        assert completed.returncode == 2
        assert completed.stderr.count("\n") == 1
        assert "pip install '.[wandb]' in the rollout-sidecar clone" in completed.stderr


class TestServeFlags:
    @pytest.mark.parametrize("interval", ["0", "nan", "1e9"])
    def test_bad_interval_is_one_line_and_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], interval: str
    ) -> None:
        argv = ["serve", "--port", "0", "--journal", str(tmp_path / "j"), f"--tracker-interval={interval}"]
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--wandb-project", "p"])
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--tracker-interval" in err

    @pytest.mark.parametrize("ref", ["x" * 65, "a b", "'; drop", ""])
    def test_bad_mlflow_run_id_is_one_line_and_exit_2(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], ref: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
        if not ref:
            monkeypatch.setenv("MLFLOW_RUN_ID", "a/b")  # the environment's id is checked the same way
        assert main(["health-check", str(tmp_path), "--mlflow-run-id", ref]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--mlflow-run-id" in err


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    generate_run(num_tasks=6, repeats=2, seed=4, fault_rate=0.04).write_rollouts(run_dir)
    return run_dir


def test_health_check_logs_its_report_into_the_mlflow_run(
    tmp_path: Path, mlflow_env: MlflowServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_env.url)
    experiment = client.create_experiment("eval")
    ref = client.create_run(experiment).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", ref)  # as `mlflow run` / a trainer's job sets it
    run_dir = _run_dir(tmp_path)
    page = tmp_path / "run.html"
    assert main(["health-check", str(run_dir), "--workers", "1", "--html", str(page)]) == 0
    run = client.get_run(ref)
    assert run.info.status == "RUNNING"  # not the health check's run to end
    summary = (run_dir / "quality_summary.json").read_bytes()
    verdicts = orjson.loads(summary)["run"]["verdicts"]
    for verdict, count in verdicts.items():
        assert run.data.metrics[f"rollout_sidecar/final/health/{verdict}"] == count
    assert run.data.params["rollout_sidecar/run_id"] == "run"
    local = Path(client.download_artifacts(ref, "rollout_sidecar", str(tmp_path / "down")))
    assert {p.name: p.read_bytes() for p in local.iterdir()} == {
        "quality_summary.json": summary,
        "rollout_verdicts.jsonl": (run_dir / "rollout_verdicts.jsonl").read_bytes(),
        "report.html": page.read_bytes(),  # the page --html wrote, logged beside the report
    }


def test_health_check_logs_its_report_into_the_wandb_run(tmp_path: Path, wandb_offline: Path) -> None:
    import wandb

    trainer = wandb.init(project="eval", id="trainer-1", settings=wandb.Settings(silent=True, console="off"))
    trainer.log({"progress/total/rollouts_per_min": 3.0})
    trainer.finish()
    run_dir = _run_dir(tmp_path)
    assert main(["health-check", str(run_dir), "--workers", "1", "--wandb-run-path", "eval/trainer-1"]) == 0
    dirs = wandb_run_dirs(wandb_offline)
    assert len(dirs) == 2  # the trainer's, and the same run resumed by the health check
    logged = read_run(dirs[-1])
    assert logged.run_id == "trainer-1"
    verdicts = orjson.loads((run_dir / "quality_summary.json").read_bytes())["run"]["verdicts"]
    for verdict, count in verdicts.items():
        assert logged.summary[f"rollout_sidecar/final/health/{verdict}"] == count
    (row,) = logged.history
    assert row["rollout_sidecar/step"] == 0  # the sidecar's own step, a key beside the trainer's
    assert logged.step_metrics["rollout_sidecar/*"] == "rollout_sidecar/step"
    (report,) = [files for name, files in logged.artifacts.items() if name.startswith("rollout_sidecar-")]
    assert report == {
        "quality_summary.json": (run_dir / "quality_summary.json").read_bytes(),
        "rollout_verdicts.jsonl": (run_dir / "rollout_verdicts.jsonl").read_bytes(),
    }


def test_health_check_pays_nothing_for_the_trackers_it_is_not_given() -> None:
    """Registering the tracker flags loads no export machinery: a plain ``health-check`` process
    would otherwise pay ~20 ms and ~6 MB for ``sidecar.export.trackers.session``."""
    probe = (
        "import argparse, sys\n"
        "from sidecar.cli import register_health_check\n"
        "register_health_check(argparse.ArgumentParser().add_subparsers())\n"
        "print(sorted(m for m in ('sqlite3', 'importlib.metadata', 'sidecar.export.trackers.session',"
        " 'sidecar.export.trackers.backends', 'mlflow', 'wandb') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
