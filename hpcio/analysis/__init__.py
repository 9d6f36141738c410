"""Post-hoc figures from what runs wrote: the run summary (AU, samples/s, MiB/s, stall) and
the tables that put runs side by side; and ``python -m hpcio.analyze``'s parts: run and
sweep directories read back (runs; every file checked against its schema first:
schema), Darshan logs (darshanlog), tables A-C (tables), rules
(findings), the scaling model (model), a prediction of ``hpcio.simulate`` read back
(prediction), figures (figures) and the report (report); and
stores of one dataset compared, refusing different record counts (stores). No MPI."""
