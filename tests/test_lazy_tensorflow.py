"""rl/lazy_tensorflow.py: reverb loads without TensorFlow's `__init__`, every name the
stand-in answers is the real package's, and anything else still gets all of TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

# Needs the reverb stack (reverb, TensorFlow, Ray or an environment only it has): see pytest.ini.
pytestmark = pytest.mark.reverb

# Each probe runs in a fresh interpreter: the stand-in is only installed before any import
# of TensorFlow, and a test process may have imported it already.
REVERB_ONLY = """
import json, sys
import rl, reverb
from rl import lazy_tensorflow
server = reverb.Server([reverb.Table.queue("q", 10)])
client = reverb.Client(f"localhost:{server.port}")
client.insert([1.0], {"q": 1.0})
sample = next(iter(client.sample("q", num_samples=1)))
server.stop()
from tensorflow.python.eager import context
print(json.dumps({
    "stand_in": lazy_tensorflow.installed(),
    "eager": context.executing_eagerly(),  # TensorFlow 2 behaviour, as its __init__ would set.
    "keras": "keras" in sys.modules,
    "public_api": "tensorflow._api.v2.compat" in sys.modules,
    # tf.data's package __init__s (experimental transformations, the data service) wait.
    "data_service": "tensorflow.python.data.experimental.service" in sys.modules,
    # reverb's version check got the standard library's distutils, not setuptools'.
    "setuptools": "setuptools" in sys.modules,
    "distutils": __import__("distutils").__file__.startswith(__import__("sysconfig").get_paths()["stdlib"]),
    "sampled": float(sample[0].data[0]),
}))
"""

SAME_NAMES = """
import functools, json
import rl
from rl import lazy_tensorflow as lazy
import tensorflow as tf
find = lambda root, module: functools.reduce(getattr, module.split(".")[1:], root)
seen = {(module, name): getattr(find(tf, module), name) for module, names in lazy._NAMES.items() for name in names}
before = lazy.installed()
real = lazy.load_fully()
differ = [f"{m}.{n}" for (m, n), value in seen.items() if getattr(find(real, m), n) is not value]
print(json.dumps({"before": before, "after": lazy.installed(), "differ": differ}))
"""

FULL_ON_DEMAND = """
import json
import rl, reverb  # reverb first: tf.data's modules loaded, its packages deferred.
from rl import lazy_tensorflow
import tensorflow as tf
dense = tf.keras.layers.Dense  # Not a light name: TensorFlow's __init__ runs here.
import tensorflow.compat.v2 as v2
import tensorflow_probability as tfp
print(json.dumps({
    "stand_in": lazy_tensorflow.installed(),
    "dense": dense.__name__,
    "v2_zeros": v2.zeros([2]).shape.as_list(),
    "same_module": __import__("sys").modules["tensorflow"] is tf,
    "data_service": tf.data.experimental.service.DispatchServer.__name__,
    "normal": tfp.distributions.Normal(0.0, 1.0).mean().numpy().item(),
}))
"""

WITHOUT_TENSORFLOW = """
import json, sys
import rl, reverb
from rl import lazy_tensorflow
stand_in = sys.modules["tensorflow"]
import jax, jax.numpy as jnp
import rl.agents.r2d2.builder as losses  # rescale imports rlax, and with it TensorFlow Probability's JAX substrate.
from rl.networks.base import tanh_normal  # distrax, on first use.
_, log_prob = tanh_normal(jnp.zeros(2), jnp.ones(2)).sample_and_log_prob(seed=jax.random.PRNGKey(0))
report = {
    "stand_in": lazy_tensorflow.installed(),
    "same_module": sys.modules["tensorflow"] is stand_in,
    "rescaled": float(losses.rescale(jnp.array(3.0), 0.0)),
    "finite": bool(jnp.isfinite(log_prob)),
}
import tensorflow as tf
import pytest
report["dense"] = tf.keras.layers.Dense.__name__  # TensorFlow itself still loads on demand.
print(json.dumps(report))
"""


def _probe(script: str, **environment: str) -> dict:
    # A fresh shell's environment: a process that imported rl (this one, under pytest) has set
    # SETUPTOOLS_USE_DISTUTILS for its children.
    env = {key: value for key, value in os.environ.items() if key != "SETUPTOOLS_USE_DISTUTILS"}
    env.update({"TF_CPP_MIN_LOG_LEVEL": "2", **environment})
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_reverb_serves_and_samples_without_tensorflows_public_api():
    report = _probe(REVERB_ONLY)
    assert report == {
        "stand_in": True,
        "eager": True,
        "keras": False,
        "public_api": False,
        "data_service": False,
        "setuptools": False,
        "distutils": sys.version_info < (3, 12),
        "sampled": 1.0,
    }


def test_every_name_the_stand_in_answers_is_the_real_packages_object():
    report = _probe(SAME_NAMES)
    assert report == {"before": True, "after": False, "differ": []}


def test_any_other_name_or_module_loads_all_of_tensorflow_into_the_same_module():
    report = _probe(FULL_ON_DEMAND)
    assert report == {
        "stand_in": False,
        "dense": "Dense",
        "v2_zeros": [2],
        "same_module": True,
        "data_service": "DispatchServer",
        "normal": 0.0,
    }


def test_the_stand_in_can_be_turned_off():
    report = _probe(REVERB_ONLY, RL_LAZY_TENSORFLOW="0")
    assert report["stand_in"] is False and report["public_api"] is True and report["sampled"] == 1.0
    assert report["data_service"] is True and report["setuptools"] is True
    assert report["eager"] is True


def test_rlax_and_distrax_come_without_loading_tensorflow():
    report = _probe(WITHOUT_TENSORFLOW)
    assert report == {"stand_in": True, "same_module": True, "rescaled": 1.0, "finite": True, "dense": "Dense"}
