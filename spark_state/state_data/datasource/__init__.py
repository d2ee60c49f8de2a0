"""``spark.read.format("spark-state")`` and ``format("spark-state-metadata")``: the options
checked and planned on the driver (:mod:`.options`), the Python Data Source API classes
(:mod:`.sources`, Spark 4.0+) and their registration with a session (:mod:`.register`).
"""
