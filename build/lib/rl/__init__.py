"""A small distributed RL research library: actors, learners and reverb replay in JAX."""

from rl import lazy_tensorflow

# Before anything imports reverb: reverb then loads only the parts of TensorFlow it uses.
lazy_tensorflow.install()
