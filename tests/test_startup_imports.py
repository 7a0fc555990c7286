"""A training process imports neither Keras (behind ``import tensorflow``) nor PyTorch (behind tensorboardX), and
its TensorBoard scalars are still written; a user's own choice of Keras, or a torch already imported, is kept.
Fresh interpreters, because the point is what a process imports from a clean start."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO

WRITE = """
import json, sys
{before}
import ptm_jax
import tensorflow as tf
from ptm_jax.train.metrics import MetricsWriter
w = MetricsWriter(sys.argv[1], total_steps=2, progress_bar=False)
w.write(1, "train", {{"loss": 2.5}})
w.write(2, "train", {{"loss": 1.25}})
w.close()
loaded = [m for m in ("keras", "torch", "sklearn") if m in sys.modules]
import glob
from tensorflow.core.util import event_pb2
scalars = []
for path in sorted(glob.glob(sys.argv[1] + "/tb/events.*")):
    for raw in tf.data.TFRecordDataset(path):
        event = event_pb2.Event.FromString(raw.numpy())
        scalars += [(event.step, v.tag, round(v.simple_value, 4)) for v in event.summary.value]
import torch  # importable afterwards: the guard leaves nothing behind
print(json.dumps({{"loaded": loaded, "scalars": scalars, "torch": torch.__name__}}))
"""


def run(tmp_path, before: str = "", **env) -> dict:
    full = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    full.update(PYTHONPATH=str(REPO), **env)
    done = subprocess.run([sys.executable, "-c", WRITE.format(before=before), str(tmp_path)], env=full,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_training_process_imports_no_keras_or_torch_and_still_writes_tensorboard_scalars(tmp_path):
    got = run(tmp_path)
    assert got["loaded"] == []
    assert got["scalars"] == [[1, "train/loss", 2.5], [2, "train/loss", 1.25]]
    assert got["torch"] == "torch"


def test_a_user_choice_of_keras_and_an_imported_torch_are_kept(tmp_path):
    got = run(tmp_path / "a", before="import torch", TF_USE_LEGACY_KERAS="0")
    assert got["loaded"][:2] == ["keras", "torch"]
    assert got["scalars"] == [[1, "train/loss", 2.5], [2, "train/loss", 1.25]]
