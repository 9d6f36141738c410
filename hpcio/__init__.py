"""hpcio: MPI-parallel I/O benchmark for deep-learning training on HPC systems.

Where things live (one home per concern)::

    data/       datasets: the contract (manifest + record index), writing them, synthetic
                pictures and presets, imports and indexes of data made elsewhere, and the
                ``datagen`` command
    formats/    one module per storage format (lmdb, leveldb, hdf5, images, packed): its
                writer, its native (library) reader and its indexer, all behind the
                protocol in formats/base.py; FORMATS registry; Caffe's Datum in datum.py
    plan.py     the sample plan: which records each rank gets at each step
    readers/    readers that execute a plan (naive, coordinated, memory; READERS registry),
                with batch assembly, read jobs, node-shared reads, ROMIO hints and reads
                through parallel HDF5 (h5mpio)
    cache.py    page-cache state of a dataset (cold, warm, as is), proven with mincore
    train/      the ``train`` command: options, trainer loop, gradient exchange, models,
                emulated compute, preprocessing pipeline, checkpoints, stop vote
    measure/    what a run measures: step accounting, system probes (/proc), the sampler
                thread, the run directory
    analysis/   figures and tables computed afterwards from what runs wrote: run summaries,
                Darshan logs read into arrays, the tables, findings and scaling model of
                the ``analyze`` command, and its report; stores of one dataset compared
                (stores: the studies in analysis/ use it)
    bench.py, demo.py, datagen.py, results.py, analyze.py   the other commands (``python -m
                hpcio.<command>``; ``results summarize`` for runs that did not finish)
    mpiutil.py  MPI patterns: work on rank 0 with errors raised everywhere, node
                communicators, array broadcasts; mpicompat.py: MPI stacks known to break
    sweep.py    the ``sweep`` command: one train job per point, resumable
    simulate/   the ``simulate`` command: a SimGrid model of the platform (platform files
                in platforms/) replaying each reader's request pattern (``@pattern``
                beside the reader), calibrated on runs and validated on held-out rank
                counts
    mapfault.py  a fault in a mapped shard turned into a line naming the shard
    cli.py, errors.py, fsutil.py, progress.py    argument types, one-line errors, atomic
                files, progress on rank 0 (a bar on a terminal, plain lines in a log)

A new format is a module in formats/ added to FORMATS; a new reader a class in readers/
decorated with ``@register``; a new per-step figure a column in measure/steps.py and its
summary in analysis/summary.py; a new command a module with ``main`` run under
``errors.guard``.

Three imports are deferred, and only these: mpi4py is imported inside the functions that
use MPI (importing it initialises MPI), torch only by the training modules (it takes
seconds), so dataset tools and the analysis start without either, and the analyze
command's report (matplotlib, the ``[analysis]`` extra that compute nodes need not have)
inside its ``main``, so a missing extra is one line. Every other import is at the top of
its module.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
