"""A Keras model trained with ``tf.distribute.MultiWorkerMirroredStrategy`` (a custom loop: Keras 3's
``model.fit`` fails under MWMS with "Attempt to convert a value (PerReplica...)" even outside
smlaunch), launched with SageMaker's ``TensorFlow`` estimator and
``distribution={"multi_worker_mirrored_strategy": {"enabled": True}}``, trains across 2 emulated
hosts from the ``TF_CONFIG`` SageMaker's TensorFlow toolkit writes."""

from __future__ import annotations

import importlib.util
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from smlaunch import LocalSession, TensorFlow, contract
from tests.functional._dist_helpers import ROLE, read_tar_json
from tests.functional._local_helpers import assert_no_job_processes, kill_leftover_jobs, wait_terminal

pytestmark = [
    pytest.mark.slow,
    pytest.mark.tensorflow,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None, reason="needs tensorflow (pip install tensorflow-cpu)"
    ),
]

MWMS = """
import argparse, json, os
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--model_dir", type=str)
parser.add_argument("--sm-model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
args, _ = parser.parse_known_args()

print(f"TF_CONFIG={os.environ['TF_CONFIG']}", flush=True)
print(f"model_dir={args.model_dir}", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"strategy.num_replicas_in_sync={strategy.num_replicas_in_sync}", flush=True)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32").reshape(8, 1)).astype("float32")
global_batch = args.batch_size * strategy.num_replicas_in_sync
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
iterator = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        features, labels = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(features, training=True) - labels)) / global_batch
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    per_replica = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


losses = []
for epoch in range(args.epochs):
    for _ in range(10):
        loss = train_step(iterator)
    losses.append(float(loss))
    print(f"epoch {epoch} loss {losses[-1]:.4f}", flush=True)
kernel = model.get_weights()[0].reshape(-1).tolist()
task = json.loads(os.environ["TF_CONFIG"])["task"]
print(f"worker {task['index']} kernel_sum={sum(kernel):.6f} first_loss={losses[0]:.4f} "
      f"last_loss={losses[-1]:.4f}", flush=True)
if task["index"] == 0:  # the chief writes the model
    with open(os.path.join(args.sm_model_dir, "result.json"), "w") as f:
        json.dump({"losses": losses, "kernel": kernel}, f)
"""


def _run(tmp_path: Path, script: str, **kwargs: Any) -> tuple[dict[str, Any], str, Path]:
    """Run ``script`` as a TensorFlow job with ``kwargs``; its description, log and job directory."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(textwrap.dedent(script))
    root = tmp_path / "jobs"
    session = LocalSession(root)
    estimator = TensorFlow(
        entry_point="train.py",
        source_dir=str(src),
        role=ROLE,
        instance_type="ml.c5.xlarge",
        py_version="py310",
        max_run=300,
        sagemaker_session=session,
        **kwargs,
    )
    try:
        estimator.fit(wait=False)
        job = estimator.latest_training_job
        assert job is not None
        description = wait_terminal(session.backend(), job.name, 300)
        log = "\n".join(session.backend().log_lines(job.name))
        assert_no_job_processes(job.name, root / job.name)
    finally:
        kill_leftover_jobs(root)
    assert description["TrainingJobStatus"] == contract.STATUS_COMPLETED, log[-4000:]
    return description, log, root / job.name


def test_mwms_keras_script_trains_across_two_hosts(tmp_path: Path) -> None:
    _, log, job_dir = _run(
        tmp_path,
        MWMS,
        instance_count=2,
        framework_version="2.16",
        hyperparameters={"epochs": 3},
        distribution={"multi_worker_mirrored_strategy": {"enabled": True}},
        environment={"TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": "1"},
        base_job_name="tf-mwms",
    )

    configs = {}
    for host in ("algo-1", "algo-2"):
        found = re.search(rf"\[{host}/rank 0\] TF_CONFIG=(.*)", log)
        assert found, log[-4000:]
        configs[host] = json.loads(found.group(1))
        assert f"[{host}/rank 0] strategy.num_replicas_in_sync=2" in log
        assert f"[{host}/rank 0] model_dir=file://" in log  # <output_path>/<job>/model, as the SDK
    # The toolkit's shape: every host a worker, in host order, "environment": "cloud".
    workers = configs["algo-1"]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert configs["algo-2"]["cluster"] == {"worker": workers}
    assert configs["algo-1"]["task"] == {"index": 0, "type": "worker"}
    assert configs["algo-2"]["task"] == {"index": 1, "type": "worker"}
    assert configs["algo-1"]["environment"] == configs["algo-2"]["environment"] == "cloud"

    sums = re.findall(r"worker (\d) kernel_sum=(\S+) first_loss=(\S+) last_loss=(\S+)", log)
    assert sorted(s[0] for s in sums) == ["0", "1"]
    assert sums[0][1] == sums[1][1]  # the replicas stayed in sync
    result = read_tar_json(_tar_members(job_dir), "result.json")
    assert result["losses"][-1] < result["losses"][0] / 2  # it learned


def _tar_members(job_dir: Path) -> dict[str, bytes]:
    import tarfile

    with tarfile.open(job_dir / "output" / "model.tar.gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


# The shape of the multi_worker_mirrored_strategy example's single-instance mnist.py (TF 2.14):
# model.save(<directory>) for a SavedModel, which Keras 3 refuses.
KERAS_SAVE = """
import argparse, os
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--model-dir", type=str, default=os.environ["SM_MODEL_DIR"])
args, _ = parser.parse_known_args()

x = np.random.RandomState(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, epochs=args.epochs, verbose=2)
print("keras from", tf.keras.__name__, flush=True)
model.save(os.path.join(args.model_dir, "000000001"))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("tf_keras") is None,
    reason="needs tf-keras (pip install --no-deps 'tf-keras==<TensorFlow major.minor>.*')",
)
def test_a_tf_2_14_keras_script_gets_the_images_keras_2(tmp_path: Path) -> None:
    _, log, job_dir = _run(
        tmp_path,
        KERAS_SAVE,
        instance_count=1,
        framework_version="2.14.1",
        environment={"TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert "keras from tf_keras" in log
    assert "000000001/saved_model.pb" in _tar_members(job_dir)
