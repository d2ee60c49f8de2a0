"""The demos ``spark-state demo`` runs: :mod:`.query` (a streaming word count on the provider,
killed and restarted) and :mod:`.engine` (the engine driven directly, without Spark)."""
