"""Measurement helpers: tracing and the system counters around a run."""
