"""Testing-only hooks of spark-state. Nothing here is used unless a test enables it.

:mod:`.crashpoints` -- named points in the engine where a crash test may SIGKILL the process.
"""
