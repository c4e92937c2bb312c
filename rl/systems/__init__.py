"""Compiled systems (launcher=anakin, and launcher=sebulba's learner on host blocks): a run's acting, replay and
learning as pure JAX functions, generic over the agents that name them (`base.System`: the interface; `on_policy`,
`off_policy`)."""
