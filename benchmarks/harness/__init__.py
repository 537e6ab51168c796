"""What the benchmark scripts share: the code snapshot, CPU accounting, statistics, results and
tables, the WAL backends, the delta corpus and the gateway load generators.

``snapshot``, ``cpu``, ``stats`` and ``output`` import nothing of the product, so a script can
take its code snapshot before the other modules (which import ``lakesync_platform``) load.
"""
