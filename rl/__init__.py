"""A small distributed RL research library: actors, learners and reverb replay in JAX."""
