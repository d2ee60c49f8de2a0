"""The readers of state as data: one module per thing read, each a Python function that returns a
DataFrame (or rows) and, where Spark's reader API serves it too, a ``plan_*`` function the data
source runs (:mod:`spark_state.state_data.datasource`).
"""
