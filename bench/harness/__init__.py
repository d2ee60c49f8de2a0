"""What the benchmarks in ``bench/`` share, one owner per idea.

* :mod:`.contenders` -- the state store providers a benchmark compares (Spark's HDFS and RocksDB
  providers, spark-state's on each backend): class names and the confs each one needs;
* :mod:`.sessions`   -- a SparkSession for a contender at a given heap (``--heaps``);
* :mod:`.inputs`     -- parquet input, one file per micro-batch, in the order the file source reads;
* :mod:`.queries`    -- starting a streaming query into the ``noop`` sink and following its
  progress batch by batch (as JSON dicts, the same on every Spark line);
* :mod:`.workers`    -- one measured run in a fresh Python process and JVM, bounded by a cap;
* :mod:`.heap`       -- the JVM heap sampled while a query runs (peak, live set, held after a GC);
* :mod:`.processes`  -- RSS and open files of an application's processes (JVM, Python workers);
* :mod:`.keyed_fns`  -- the keyed functions of the benchmarks (the running count, ...), shipped
  to PySpark's workers by value;
* :mod:`.stats`      -- medians, percentiles, spread and ratios, and how a ratio prints;
* :mod:`.results`    -- result JSON and the recorded ratios that ``bench/compare.py`` reads;
* :mod:`.phases`     -- a call's time per phase, by wrapping the functions that do the work (the
  worker profiles);
* :mod:`.moto`       -- an S3 server on loopback and the storage options that reach it.

``bench/`` is not a package: its benchmarks run as scripts, so ``bench/`` is the first entry of
``sys.path`` and ``import harness`` finds this folder. PySpark's Python workers do not have
``bench/`` on their path; what they run (keyed functions) is pickled by value
(:func:`.keyed_fns.ship_by_value`), so nothing here needs to be importable there.
"""
