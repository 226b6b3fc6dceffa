"""smlaunch.runtime.tracebacks: the failing process's exception, read from recorded stderr samples (Python
3.11's
output, TensorFlow's and torch's C++ lines) and from this interpreter's own output."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from smlaunch.runtime.tracebacks import failure_summary

TF_AFTER_TRACEBACK = """
Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 88, in <module>
    model.fit(x_train, y_train, epochs=args.epochs)
  File "/usr/local/lib/python3.11/site-packages/keras/src/utils/traceback_utils.py", line 122, in handler
    raise e.with_traceback(filtered_tb) from None
ValueError: Shapes (None, 10) and (None, 1) are incompatible
2025-05-01 12:00:00.123456: I tensorflow/core/common_runtime/executor.cc:1197] Executor start aborting
W0000 00:00:1714567890.123456   12345 op_level_cost_estimator.cc:699] Error in PredictCost() for the op
Saving run metadata before exit
"""

CHAINED_MULTILINE = """
Traceback (most recent call last):
  File "<string>", line 3, in <module>
KeyError: 'k'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "<string>", line 5, in <module>
RuntimeError: lookup failed
second line
third
"""

HANDLING_THEN_GROUP = """
Traceback (most recent call last):
  File "<string>", line 4, in <module>
  File "<string>", line 2, in f
ValueError: 1

During handling of the above exception, another exception occurred:

  + Exception Group Traceback (most recent call last):
  |   File "<string>", line 6, in <module>
  | ExceptionGroup: several failed (2 sub-exceptions)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "<string>", line 4, in <module>
    |   File "<string>", line 2, in f
    | ValueError: 1
    +---------------- 2 ----------------
    | TypeError: t
    +------------------------------------
"""

SYNTAX_ERROR_OF_THE_ENTRY_POINT = """
  File "/opt/ml/code/train.py", line 1
    def f(:
          ^
SyntaxError: invalid syntax
"""

SYNTAX_ERROR_OF_AN_IMPORT = """
Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 1, in <module>
    import model
  File "/opt/ml/code/model.py", line 4
    return x +
              ^
SyntaxError: invalid syntax
"""

IGNORED_AT_SHUTDOWN = """
Traceback (most recent call last):
  File "<string>", line 5, in <module>
OSError: [Errno 28] No space left on device
Exception ignored in: <function A.__del__ at 0x7fb24c0d7100>
Traceback (most recent call last):
  File "<string>", line 3, in __del__
AttributeError: gone
"""

EMPTY_FIRST_LINE = """
Traceback (most recent call last):
  File "<string>", line 1, in <module>
ValueError:
starts with a newline
"""

REMOTE_TRACEBACK = '''
multiprocessing.pool.RemoteTraceback:
"""
Traceback (most recent call last):
  File "/usr/lib/python3.11/multiprocessing/pool.py", line 125, in worker
    result = (True, func(*args, **kwds))
  File "/opt/ml/code/train.py", line 9, in load
    raise FileNotFoundError(path)
FileNotFoundError: /opt/ml/input/data/train/part-0.csv
"""

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/opt/ml/code/train.py", line 20, in <module>
    shards = pool.map(load, paths)
FileNotFoundError: /opt/ml/input/data/train/part-0.csv
'''

SEGFAULT = """
epoch 3 step 120 loss 0.412
Fatal Python error: Segmentation fault

Current thread 0x00007f013ce87b80 (most recent call first):
  File "/usr/local/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 116 in forward
  File "/opt/ml/code/train.py", line 40 in <module>
"""

CPP_TERMINATE = """
[W ProcessGroupGloo.cpp:721] Warning: Unable to resolve hostname to a (local) address.
terminate called after throwing an instance of 'gloo::EnforceNotMet'
  what():  [enforce fail at ../gloo/transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4
"""

KILLED_WITHOUT_TRACEBACK = """
epoch 3 step 120 loss 0.412
INFO:root:Saving checkpoint to /opt/ml/checkpoints/step-120.pt
"""

ARGPARSE_REFUSES_A_HYPERPARAMETER = """
usage: train.py [-h] [--epochs EPOCHS]
train.py: error: unrecognized arguments: --learning-rate 0.01
Saving run metadata before exit
"""

FAULT_INJECTED = """
smlaunch fault injection: this rank crashes now with exit code 7; it was at:
  File "/opt/ml/code/train.py", line 12, in <module>
    time.sleep(0.1)
"""

SHELL_SCRIPT = """
+ python prepare.py --fold 3
ERROR: manifest /opt/ml/input/data/train/manifest.json not found
"""


@pytest.mark.parametrize(
    ("sample", "exit_code", "summary"),
    [
        (TF_AFTER_TRACEBACK, 1, "ValueError: Shapes (None, 10) and (None, 1) are incompatible"),
        (CHAINED_MULTILINE, 1, "RuntimeError: lookup failed"),
        (HANDLING_THEN_GROUP, 1, "ExceptionGroup: several failed (2 sub-exceptions)"),
        (SYNTAX_ERROR_OF_THE_ENTRY_POINT, 1, "SyntaxError: invalid syntax"),
        (SYNTAX_ERROR_OF_AN_IMPORT, 1, "SyntaxError: invalid syntax"),
        (IGNORED_AT_SHUTDOWN, 1, "OSError: [Errno 28] No space left on device"),
        (EMPTY_FIRST_LINE, 1, "ValueError: starts with a newline"),
        (REMOTE_TRACEBACK, 1, "FileNotFoundError: /opt/ml/input/data/train/part-0.csv"),
        (SEGFAULT, 139, "Fatal Python error: Segmentation fault"),
        (
            CPP_TERMINATE,
            134,
            "gloo::EnforceNotMet: [enforce fail at ../gloo/transport/tcp/pair.cc:446] "
            "op.preamble.length <= op.nbytes. 8 vs 4",
        ),
        (KILLED_WITHOUT_TRACEBACK, 137, ""),  # the first line of the failure text names SIGKILL
        (
            ARGPARSE_REFUSES_A_HYPERPARAMETER,
            2,
            "train.py: error: unrecognized arguments: --learning-rate 0.01",
        ),
        (FAULT_INJECTED, 7, "smlaunch fault injection: this rank crashes now with exit code 7; it was at:"),
        (SHELL_SCRIPT, 3, "ERROR: manifest /opt/ml/input/data/train/manifest.json not found"),
        ("", 1, ""),
    ],
)
def test_recorded_stderr(sample: str, exit_code: int, summary: str) -> None:
    assert failure_summary(sample.strip("\n").splitlines(), exit_code) == summary


def test_a_traceback_cut_before_its_exception_names_no_exception() -> None:
    lines = TF_AFTER_TRACEBACK.strip("\n").splitlines()[:5]  # the tail ended inside the frames
    assert failure_summary(lines, 1) == "Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("script", "summary"),
    [
        (
            """
            import atexit, sys
            atexit.register(lambda: print("Saving run metadata before exit", file=sys.stderr))
            def fit():
                raise ValueError("loss is nan\\nat step 3")
            try:
                fit()
            finally:
                print("2025-05-01 12:00:00.123456: I tensorflow/core/a.cc:1] done", file=sys.stderr)
            """,
            "ValueError: loss is nan",
        ),
        ("def f(:\n    pass\n", "SyntaxError: invalid syntax"),
        (
            """
            class Leaky:
                def __del__(self):
                    raise AttributeError("gone")
            leaky = Leaky()
            try:
                {}["weights"]
            except KeyError as error:
                raise RuntimeError("no weights") from error
            """,
            "RuntimeError: no weights",
        ),
    ],
)
def test_this_interpreters_own_output(tmp_path: Path, script: str, summary: str) -> None:
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert failure_summary(done.stderr.splitlines(), done.returncode) == summary
