"""What a run measures: per-step accounting (:mod:`.steps`), system probes (:mod:`.probes`),
the sampler thread (:mod:`.sampler`), the run directory (:mod:`.results`), Darshan
tracing (:mod:`.darshan`) and the reading of its logs (:mod:`.darshanlog`)."""
