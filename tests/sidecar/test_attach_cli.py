"""``rollout-sidecar attach``: the launcher, run as a real process over real children.

Signals reach the child once (forwarded, or from the terminal itself), attach exits with the child's
code, bad input exits 2, and without ``--sidecar`` its own sidecar writes the report files and the
page beside the job's output (the job is ``attach_standin``'s small NeMo Gym stand-in).
"""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import orjson
import pytest

from dispatcher_client.attach import BOOTSTRAP_DIR
from tests.dispatcher_client.attach_standin import write_standin
from tests.dispatcher_client.support import free_port

ATTACH = [sys.executable, "-m", "sidecar.cli", "attach"]
#: Counts the SIGINT / SIGTERM it gets; after the first, a second (a double delivery) has a second to land.
WAITER = """
import signal, sys, time
got = []
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda number, frame: got.append(signal.Signals(number).name))
print("ready", flush=True)
while not got:
    time.sleep(0.01)
time.sleep(1.0)
print("got", ",".join(got), flush=True)
sys.exit(10 + len(got))
"""


def _attach(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ATTACH, *args], capture_output=True, text=True, timeout=120, check=False, **kwargs
    )  # type: ignore[call-overload,no-any-return]


def _closed() -> str:
    return f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize(
    ("code", "status"),
    [("import sys; sys.exit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)],
)
def test_exits_with_the_childs_code(code: str, status: int) -> None:
    assert _attach("--sidecar", _closed(), "--", sys.executable, "-c", code).returncode == status


def test_a_command_that_is_not_there() -> None:
    done = _attach("--sidecar", _closed(), "--", "no-such-command-rollout-sidecar")
    assert done.returncode == 127 and "cannot run 'no-such-command-rollout-sidecar'" in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_sent_to_attach_reaches_the_child_once(sig: signal.Signals) -> None:
    argv = [*ATTACH, "--sidecar", _closed(), "--", sys.executable, "-c", WAITER]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as launcher:
        assert launcher.stdout is not None and launcher.stdout.readline() == "ready\n"
        launcher.send_signal(sig)
        assert launcher.wait(60) == 11 and launcher.stdout.read() == f"got {sig.name}\n"


def test_ctrl_c_at_the_terminal_reaches_the_child_once() -> None:
    """The terminal sends SIGINT to the whole foreground group, the child included: attach must not
    forward it again (a second Ctrl-C is NeMo Gym's 'stop now')."""
    pid, terminal = pty.fork()
    if pid == 0:  # the session leader on a new terminal, as a shell's foreground job
        os.execv(sys.executable, [*ATTACH, "--sidecar", _closed(), "--", sys.executable, "-c", WAITER])
    seen = b""
    while b"ready" not in seen:
        seen += os.read(terminal, 1024)
    os.write(terminal, b"\x03")
    while True:
        try:
            chunk = os.read(terminal, 1024)
        except OSError:  # EIO: every process on the terminal is gone
            break
        if not chunk:
            break
        seen += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 11 and b"got SIGINT\r\n" in seen, seen


def test_the_child_environment(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    names = (
        "PYTHONPATH",
        *(f"ROLLOUT_SIDECAR_ATTACH_{k}" for k in ("URL", "RUN_ID", "TOKEN_FILE", "POOLED")),
    )
    code = f"import os; print(*(os.environ.get(k) for k in {names}), sep='|')"
    env = {**os.environ, "PYTHONPATH": "/theirs", "ROLLOUT_SIDECAR_ATTACH_RUN_ID": "stale"}
    args = [
        "--sidecar",
        "http://127.0.0.1:9",
        "--token-file",
        str(token),
        "--pooled",
        "--",
        sys.executable,
        "-c",
        code,
    ]
    done = _attach(*args, env=env)
    expected = [f"{BOOTSTRAP_DIR}{os.pathsep}/theirs", "http://127.0.0.1:9", "None", str(token), "1"]
    assert done.stdout.strip().split("|") == expected, done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "give the command to run after --"),
        (["--pooled", "--", "true"], "--pooled needs --sidecar"),
        (["--sidecar", "http://127.0.0.1:9", "--keep-serving", "--", "true"], "are for the own sidecar"),
        (["--run-id", "bad id", "--", "true"], "run id 'bad id' must match"),
        (["--token-file", "/no/such/token", "--", "true"], "/no/such/token"),
        (["--sidecar", "ftp://x", "--", "true"], "--sidecar"),
    ],
)
def test_bad_input_exits_2(args: list[str], said: str) -> None:
    done = _attach(*args)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_own_sidecar_writes_reports_and_page_beside_the_output(tmp_path: Path) -> None:
    job = write_standin(tmp_path)
    output = tmp_path / "results" / "rollouts.jsonl"
    output.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SLURM_JOB_ID": "77"}
    done = _attach("--", sys.executable, str(job), f"++output_jsonl_fpath={output}", env=env)
    assert done.returncode == 0, done.stderr
    beside = output.parent / "rollouts.jsonl.sidecar"
    assert "run 77-rollouts: http://127.0.0.1:" in done.stderr
    assert f"report files and page.html of 77-rollouts written to {beside}" in done.stderr
    report = orjson.loads((beside / "report.json").read_bytes())
    assert (report["run_id"], report["accounting"]["succeeded"], report["accounting"]["drained"]) == (
        "77-rollouts",
        3,
        2,
    )
    assert {"quality_summary.json", "rollout_verdicts.jsonl", "page.html", "journal.sqlite"} <= {
        p.name for p in beside.iterdir()
    }
    assert b"77-rollouts" in (beside / "page.html").read_bytes()


def test_keep_serving_until_ctrl_c(tmp_path: Path) -> None:
    job = write_standin(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SLURM_JOB_ID": "78"}
    argv = [
        *ATTACH,
        "--keep-serving",
        "--out",
        str(tmp_path / "kept"),
        "--",
        sys.executable,
        str(job),
        str(tmp_path / "o.jsonl"),
    ]
    with subprocess.Popen(
        argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as launcher:
        assert launcher.stderr is not None
        line = ""
        while "until Ctrl-C" not in line:
            line = launcher.stderr.readline()
            assert line, "attach ended without serving"
        url = line.split("serving ")[1].split("/ until")[0]
        assert httpx.get(f"{url}/runs/78-o").status_code == 200
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(60) == 0
