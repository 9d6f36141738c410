"""Post-hoc figures from what runs wrote: the run summary (AU, samples/s, MiB/s, stall) and
the tables that put runs side by side; and ``python -m hpcio.analyze``'s parts: run and
sweep directories read back (runs; every file checked against its schema first:
schema; their Darshan logs through hpcio.measure.darshanlog), tables A-C (tables), rules
(findings; checkpoints' own: checkpoints), Drishti's own verdicts on the logs (drishti),
the scaling model (model), a prediction of ``hpcio.simulate`` read back (prediction),
figures (figures) and the report (report); stores of one dataset compared, refusing
different record counts (stores); runs as rows named as MLPerf Storage's report names them,
with its rules checked (export); and MLPerf Storage's accelerators-supported search judged
(accelerators). No MPI."""
