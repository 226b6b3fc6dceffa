"""FailureReason: the wire form keeps SageMaker's 1,024 characters, cut only at line boundaries;
``failure.json`` (what a local describe() reports) keeps the failing rank's whole traceback."""

from __future__ import annotations

import json
from pathlib import Path

from smlaunch import contract
from smlaunch.runtime.launchers.base import RankFailure, RunResult
from smlaunch.runtime.report import report_run, wire_failure_reason


def long_traceback(frames: int = 40) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for depth in range(frames):
        lines.append(f'  File "/opt/ml/code/train.py", line {10 + depth}, in level_{depth}')
        lines.append(f"    return level_{depth + 1}(batch, model, optimizer)")
    lines.append("ValueError: loss is nan at step 1200 (lr=0.1, batch=64)")
    return lines


def test_short_text_is_sent_as_is() -> None:
    assert wire_failure_reason("AlgorithmError: boom\nValueError: x") == "AlgorithmError: boom\nValueError: x"


def test_long_text_is_cut_at_line_boundaries_keeping_who_and_why() -> None:
    text = "\n".join(
        [
            "AlgorithmError: rank 3 on host algo-2 exited with code 1",
            "ErrorMessage: ValueError: loss is nan",
            *long_traceback(),
        ]
    )
    assert len(text) > 2 * contract.FAILURE_REASON_MAX_CHARS
    wire = wire_failure_reason(text)
    assert len(wire) <= contract.FAILURE_REASON_MAX_CHARS
    original = set(text.splitlines())
    wire_lines = wire.splitlines()
    left_out = [line for line in wire_lines if line not in original]
    assert len(left_out) == 1 and left_out[0].startswith("... (") and "lines left out" in left_out[0]
    assert wire_lines[0] == text.splitlines()[0] and wire_lines[1].startswith("ErrorMessage: ")
    assert wire_lines[-1] == "ValueError: loss is nan at step 1200 (lr=0.1, batch=64)"


def test_a_single_line_longer_than_the_limit_is_the_only_cut_inside_a_line() -> None:
    wire = wire_failure_reason("AlgorithmError: " + "x" * 3000 + "\nlast")
    assert len(wire) <= contract.FAILURE_REASON_MAX_CHARS and wire.endswith(" ...")


def test_report_keeps_the_whole_traceback_in_failure_json_and_the_wire_form_in_failure(
    tmp_path: Path,
) -> None:
    paths = contract.Paths(tmp_path)
    failure = RankFailure("algo-2", "rank 3", 3, 1, 10.0, long_traceback())
    report_run(paths, RunResult("algo-2", first_failure=failure))
    details = json.loads((paths.output_dir / contract.FAILURE_DETAILS_FILE).read_text())
    assert details["reason"] == failure.describe()
    assert "\n".join(long_traceback()) in details["reason"]
    wire = paths.failure_file.read_text()
    assert wire == wire_failure_reason(failure.describe()) and len(wire) <= contract.FAILURE_REASON_MAX_CHARS
