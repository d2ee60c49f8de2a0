"""``spark.read.format("spark-state")``, ``df.write.format("spark-state")`` and
``format("spark-state-metadata")``: the read options checked and planned on the driver
(:mod:`.options`), the Python Data Source API classes (:mod:`.sources`, Spark 4.0+), the writer
(:mod:`.writer`) and their registration with a session (:mod:`.register`).
"""
