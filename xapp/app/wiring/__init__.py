"""What ``mcw run`` builds, one module per part: the loop's I/O (:mod:`.components`, from
:mod:`.estimator`, :mod:`.influx`, :mod:`.mqtt` and :mod:`.telemetry`), the E2 path
(:mod:`.e2`), RMR (:mod:`.rmr`), the weights' versions and issue clock (:mod:`.versions`) and
a replica's share of the fleet (:mod:`.shards`).  :class:`xapp.app.process.XappProcess` starts
them in order and stops them in reverse."""
