"""ptm_jax: pretraining and finetuning the classic pretrained-language-model family in JAX/Flax."""
import os as _os
import sys as _sys
from importlib.util import find_spec as _find_spec

__version__ = "0.1.0"

# tf.data is all that ptm_jax takes from TensorFlow. Since TF 2.16, `import tensorflow` imports Keras 3 eagerly, and
# Keras 3 imports scikit-learn and matplotlib when they are installed: about 2.4 s of every process start on a
# 2-core machine (benchmarks/startup_imports.py). TF_USE_LEGACY_KERAS=1 points TF at tf_keras instead; where that
# is not installed TF imports no Keras at all, and `tf.keras` is unavailable in the process. A value the user set is
# kept, and nothing is set once TensorFlow is imported or when tf_keras is installed.
if "TF_USE_LEGACY_KERAS" not in _os.environ and "tensorflow" not in _sys.modules and _find_spec("tf_keras") is None:
    _os.environ["TF_USE_LEGACY_KERAS"] = "1"
