"""Differential corpus for ``health.contract.conversation`` against the NeMo Gym 0.7.0 oracle.

NEEDS THE ORACLE (``source /tmp/oracle/env.sh``); a development tool, never used by tests or CI.

Builds the item corpus of ``conversation_corpus.py`` (plus ``--random N`` multi-mutation items),
validates each item with the reference's item union (a subprocess under ``$ORACLE_PY``) and with ours,
and prints every item whose outcome differs: accepted (by which tag, and a fingerprint of the canonical
dump), rejected, another exception type, or a failing dump. With ``--end-to-end N --run-dir DIR`` it also
runs ``refcli.py health-check`` on N sampled items (one rollout each, plus multi-item conversations and
nesting-depth probes) and compares each ``record_unreadable`` error with ``canonical_trajectory``'s.

    .venv/bin/python benchmarks/dev/conversation_parity.py [--random 40000 --seed 1] [--diffs FILE]
    .venv/bin/python benchmarks/dev/conversation_parity.py --end-to-end 100000 --run-dir /tmp/e2e

Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversation_corpus import BASES, corpus, deep, random_items, recombined_items
from pydantic import TypeAdapter, ValidationError

from health.contract.conversation import ConversationItem, item_tag

_ORACLE_SERVER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
from nemo_gym.openai_utils import NeMoGymResponseInputItem
from pydantic import TypeAdapter, ValidationError
ta = TypeAdapter(list[NeMoGymResponseInputItem])
for line in sys.stdin:
    out = []
    for item in json.loads(line):
        try:
            v = ta.validate_python([item])
        except ValidationError as e:
            out.append(["err", [list(x["loc"]) for x in e.errors(include_url=False)], None, None])
            continue
        except Exception as e:
            out.append(["exc", type(e).__name__, None, None])
            continue
        try:
            dumped = ta.dump_python(v, mode="json")[0]
            out.append(["ok", type(v[0]).__name__, None, dumped])
        except Exception as e:
            out.append(["ok", type(v[0]).__name__, type(e).__name__, None])
    sys.stdout.write(json.dumps(out, default=str) + "\n"); sys.stdout.flush()
"""

_PROC: subprocess.Popen[str] | None = None


def _oracle_proc() -> subprocess.Popen[str]:
    global _PROC
    if _PROC is None:
        python = os.environ.get("ORACLE_PY", "/tmp/oracle/venv/bin/python")
        env = dict(os.environ, PYTHONPATH=os.environ.get("ORACLE_NGREF", "/tmp/oracle/ngref"))
        _PROC = subprocess.Popen(
            [python, "-c", _ORACLE_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    return _PROC


def _oracle_run(items: list[Any], proc: subprocess.Popen[str]) -> list[list[Any]]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(items) + "\n")
    proc.stdin.flush()
    result: list[list[Any]] = json.loads(proc.stdout.readline())
    return result


_TAG_OF_CLASS = {
    "EasyInputMessage": "easy_message",
    "Message": "input_message",
    "ResponseOutputMessage": "output_message",
    "ResponseFunctionToolCall": "function_call",
    "FunctionCallOutput": "function_call_output",
    "ResponseReasoningItem": "reasoning",
    "ResponseMcpCall": "mcp_call",
    "ResponseMcpListTools": "mcp_list_tools",
    "ResponseMcpApprovalRequest": "mcp_approval_request",
    "ResponseFileSearchToolCall": "file_search_call",
    "ResponseFunctionWebSearch": "web_search_call",
    "ResponseComputerToolCall": "computer_call",
    "ImageGenerationCall": "image_generation_call",
    "ResponseCodeInterpreterToolCall": "code_interpreter_call",
    "LocalShellCall": "local_shell_call",
    "ResponseCustomToolCall": "custom_tool_call",
    "ComputerCallOutput": "computer_call_output",
    "ResponseCustomToolCallOutput": "custom_tool_call_output",
    "LocalShellCallOutput": "local_shell_call_output",
    "McpApprovalResponse": "mcp_approval_response",
    "ResponseApplyPatchToolCall": "apply_patch_call",
    "ResponseApplyPatchToolCallOutput": "apply_patch_call_output",
    "ResponseCompactionItem": "compaction",
    "ResponseFunctionShellToolCall": "shell_call",
    "ResponseFunctionShellToolCallOutput": "shell_call_output",
    "ResponseToolSearchCall": "tool_search_call",
    "ResponseToolSearchOutputItem": "tool_search_output",
    "CompactionTrigger": "compaction_trigger",
    "AdditionalTools": "additional_tools",
}


def _oracle_outcome(row: list[Any]) -> str:
    status, info, dump_error, dumped = row
    if status == "exc":
        return f"raises {info}"
    if status == "err":
        tags = sorted({str(loc[1]) if len(loc) > 1 else "-" for loc in info})
        return "reject " + ",".join(tags)
    name = info.removeprefix("NeMoGym")
    training = name.endswith("ForTraining")
    tag = _TAG_OF_CLASS.get(name.removesuffix("ForTraining"), name) + ("__training" if training else "")
    return f"accept {tag}" + (f" dump-fails {dump_error}" if dump_error else f" {_digest(dumped)}")


def _digest(dumped: Any) -> str:
    """A short fingerprint of the canonical dump, so a different dump shows as a different outcome."""
    return hashlib.sha1(json.dumps(dumped, sort_keys=True).encode()).hexdigest()[:8]


_ADAPTER: TypeAdapter[list[Any]] = TypeAdapter(list[ConversationItem])


def ours(item: Any) -> str:
    try:
        value = _ADAPTER.validate_python([item])
    except ValidationError as exc:
        tags = sorted({str(err["loc"][1]) if len(err["loc"]) > 1 else "-" for err in exc.errors()})
        return "reject " + ",".join(tags)
    except Exception as exc:
        return f"raises {type(exc).__name__}"
    outcome = f"accept {item_tag(item)}"
    try:
        dumped = _ADAPTER.dump_python(value, mode="json")[0]
    except Exception as exc:
        return outcome + f" dump-fails {type(exc).__name__}"
    return outcome + f" {_digest(dumped)}"


def _key(outcome: str) -> str:
    """Rejections compare equal whatever member reported them; the tags are kept for reading. A dump that
    fails with ValidationError is, for a trajectory, the same error as a rejection."""
    if outcome.startswith("reject") or outcome.endswith("dump-fails ValidationError"):
        return "reject"
    return outcome


def compare(items: list[Any], chunk: int = 2000) -> list[tuple[Any, str, str]]:
    proc = _oracle_proc()
    diffs = []
    for start in range(0, len(items), chunk):
        part = items[start : start + chunk]
        for item, row in zip(part, _oracle_run(part, proc), strict=True):
            expected, actual = _oracle_outcome(row), ours(item)
            if _key(expected) != _key(actual):
                diffs.append((item, expected, actual))
    return diffs


def write_run_dir(conversations: list[list[Any]], run_dir: Path) -> None:
    """One rollout per conversation: a healthy trajectory whose single invocation holds it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "rollouts.jsonl").open("w") as out:
        for index, conversation in enumerate(conversations):
            record = {
                "_ng_task_index": 0,
                "_ng_rollout_index": index,
                "ng_trajectory": {
                    "task_id": "t",
                    "rollout_id": f"r{index}",
                    "invocations": [{"invocation_id": "main", "conversation": conversation}],
                },
            }
            out.write(json.dumps(record) + "\n")


def end_to_end(conversations: list[list[Any]], run_dir: Path) -> list[tuple[Any, str | None, str | None]]:
    """Run ``refcli.py health-check`` on one rollout per conversation; compare its ``record_unreadable``
    error with the error ``health.contract.canonical_trajectory`` reports for the same trajectory."""
    from health.contract import canonical_trajectory

    write_run_dir(conversations, run_dir)
    shared = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", Path(__file__).resolve().parents[3] / "shared"))
    refcli = str(shared / "tools" / "reference" / "refcli.py")
    subprocess.run([sys.executable, refcli, "health-check", str(run_dir)], check=True, capture_output=True)
    expected: dict[int, str | None] = {}
    for line in (run_dir / "rollout_verdicts.jsonl").read_text().splitlines():
        row = json.loads(line)
        errors = [f["detail"]["error"] for f in row["findings"] if f["check"] == "record_unreadable"]
        expected[row["_ng_rollout_index"]] = errors[0] if errors else None
    diffs = []
    for index, conversation in enumerate(conversations):
        record = {"task_id": "t", "rollout_id": f"r{index}",
                  "invocations": [{"invocation_id": "main", "conversation": conversation}]}  # fmt: skip
        actual = canonical_trajectory(record)[1]
        if actual != expected[index]:
            diffs.append((conversation, expected[index], actual))
    return diffs


def _explain(diffs: list[tuple[Any, str, str]], limit: int) -> None:
    """Both dumps of the first ``limit`` items both sides accept but dump differently."""
    explained = 0
    for item, expected, actual in diffs:
        if (
            explained >= limit
            or "dump-fails" in expected + actual
            or not (expected.startswith("accept") and actual.startswith("accept"))
        ):
            continue
        explained += 1
        row = _oracle_run([item], _oracle_proc())[0]
        print("ITEM  ", json.dumps(item)[:300])
        print("ORACLE", json.dumps(row[3], sort_keys=True)[:600])
        print(
            "OURS  ",
            json.dumps(
                _ADAPTER.dump_python(_ADAPTER.validate_python([item]), mode="json")[0], sort_keys=True
            )[:600],
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--show", type=int, default=3, help="differing items to print per (type, outcome)")
    parser.add_argument(
        "--random", type=int, default=0, metavar="N", help="add N random multi-mutation items"
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the random items")
    parser.add_argument(
        "--recombine", type=int, default=0, metavar="N", help="add N items recombined from canonical dumps"
    )
    parser.add_argument("--diffs", type=Path, help="write every differing item as JSONL")
    parser.add_argument("--dump-cases", type=Path, help="write every (item, oracle outcome) as JSONL")
    parser.add_argument("--explain", type=int, default=0, help="print both dumps for N differing dumps")
    parser.add_argument("--run-dir", type=Path, help="write a run dir (one rollout per item) for refcli.py")
    parser.add_argument(
        "--end-to-end", type=int, default=0, metavar="N",
        help="also run refcli.py health-check on N sampled items (+ nesting-depth probes) in --run-dir",
    )  # fmt: skip
    args = parser.parse_args()
    items = corpus(lambda bases: [row[3] for row in _oracle_run(bases, _oracle_proc())])
    if args.random:
        items += random_items(args.random, args.seed)
    if args.recombine:
        canonical = [row[3] for row in _oracle_run(list(BASES), _oracle_proc())]
        items += recombined_items(canonical, args.recombine, args.seed)
    diffs = compare(items)
    print(f"{len(items)} items, {len(diffs)} differ")
    print(Counter((e.split(" ")[0], a.split(" ")[0]) for _, e, a in diffs).most_common())
    shown: Counter[tuple[str, str, str]] = Counter()
    for item, expected, actual in diffs:
        group = (str(item.get("type")) if isinstance(item, dict) else "-", _key(expected), _key(actual))
        shown[group] += 1
        if shown[group] > args.show:
            continue
        print(f"oracle: {expected:40s} ours: {actual:40s} {json.dumps(item)[:300]}")
    if args.diffs:
        with args.diffs.open("w") as out:
            for item, expected, actual in diffs:
                out.write(json.dumps({"item": item, "oracle": expected, "ours": actual}) + "\n")
    _explain(diffs, args.explain)
    if args.dump_cases:
        proc = _oracle_proc()
        with args.dump_cases.open("w") as out:
            for item, row in zip(items, _oracle_run(items, proc), strict=True):
                out.write(json.dumps({"item": item, "oracle": _oracle_outcome(row)}) + "\n")
    if args.end_to_end and args.run_dir:
        sample = random.Random(0).sample(items, min(args.end_to_end, len(items)))
        for levels in (252, 253, 254, 255):
            nested = deep(levels)
            sample += [{"zz": nested}, {"type": "tool_search_call", "id": "i", "execution": "server",
                       "status": "completed", "arguments": nested},
                       {"type": "mcp_call", "name": "n", "arguments": "{}",
                        "error": {"type": "mcp_tool_execution_error", "content": nested}},
                       {"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "x",
                        "zz": nested},
                       {"type": "reasoning", "id": "r",
                        "summary": [{"type": "summary_text", "text": "t", "zz": nested}]},
                       {"type": "message", "role": "user", "content": "x", "zz": nested},
                       {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}",
                        "zz": nested},
                       {"type": "additional_tools", "role": "developer",
                        "tools": [{"type": "function", "name": "f",
                                   "parameters": {"p": nested}}]}]  # fmt: skip
        rng = random.Random(1)
        conversations = [[item] for item in sample]
        conversations += [rng.sample(sample, rng.randint(2, 6)) for _ in range(len(sample) // 4)]
        e2e = end_to_end(conversations, args.run_dir)
        print(f"end to end: {len(conversations)} conversations, {len(e2e)} differ")
        for item, expected_error, actual_error in e2e[: args.show * 10]:
            print(f"  reference: {expected_error}  ours: {actual_error}  {json.dumps(item)[:200]}")
        diffs.extend((item, str(e), str(a)) for item, e, a in e2e)
    elif args.run_dir:
        write_run_dir([[item] for item in items], args.run_dir)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
