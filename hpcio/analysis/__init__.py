"""Post-hoc figures from what runs wrote: the run summary (AU, samples/s, MiB/s, stall) and
the tables that put runs side by side. Pure functions over small dicts; no MPI."""
