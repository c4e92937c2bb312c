"""Compiled systems (launcher=anakin): a whole run's acting, replay and learning as pure JAX functions,
generic over the agents that name them (`base.System`: the interface; `on_policy`, `off_policy`)."""
