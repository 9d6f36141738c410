"""hpcio: MPI-parallel I/O benchmark for deep-learning training on HPC systems.

Where things live (one home per concern)::

    data/       datasets as formats and readers rely on them: the contract (manifest +
                record index), record checksums, synthetic pictures and presets; imports
                neither formats nor readers
    formats/    one module (leveldb: a package) per storage format (lmdb, leveldb, hdf5,
                images, packed, npz, tfrecord): its writer, its native (library) reader,
                its detection and indexer of data made elsewhere, all behind the protocol
                in formats/base.py (Format, with the defaults of what a module leaves
                out); FORMATS registry; Caffe's Datum in datum.py, TensorFlow's Example in
                example.py
    datagen/    making datasets, above formats: writing them, imports and indexes of data
                made elsewhere, and the ``datagen`` command
    workloads/  DLIO workload configs (MLPerf Storage's, shipped as DLIO's files in
                dlio/, or any given) as train and datagen defaults and an AU threshold
    plan.py     the sample plan: which records each rank gets at each step
    readers/    readers that execute a plan (naive, coordinated, memory; READERS registry),
                with batch assembly, read jobs, node-shared reads, ROMIO hints and reads
                through parallel HDF5 (h5mpio)
    cache.py    page-cache state of a dataset (cold, warm, as is), proven with mincore
    train/      the ``train`` command: options, trainer loop, gradient exchange, models,
                emulated compute, preprocessing pipeline, checkpoints (the model's, or a
                checkpoint layout's through checkpoint/'s writers, sync or async:
                statecheckpoint.py), stop vote
    measure/    what a run measures and where it keeps it: step accounting, system probes
                (/proc), the sampler thread, the run directory (rundir.RunDir, the one
                reader and writer of its files, checked by schema.py), the run's
                provenance and workload hash (provenance.py), running Darshan
                (darshan.py) and reading its logs (darshanlog.py), the steps as DFTracer
                traces (trace.py)
    explain/    what is computed afterwards from what runs wrote: run summaries, the
                tables, findings and scaling model of the ``analyze`` command, its report
                and figures, predictions drawn beside runs, stores of one dataset compared
                (the studies in the top-level analysis/ use them), runs exported as rows
                (export.py)
    checkpoint/ the ``checkpoint`` command: MLPerf Storage's llama3 checkpoint layouts as DLIO
                sizes them (layout.py, configs/), their tensors (state.py), the writers
                (writers.py: DCP, torch.save, coordinated MPI-IO; WRITERS registry) and the
                timed write-evict-read sequence with its run directory (run.py); below train
    world.py    the job's ranks and nodes from MPI (World) and torch.distributed's group
                started from them (train.dist re-exports both)
    bench.py, demo.py, results.py, analyze.py   the other commands (``python -m
                hpcio.<command>``; ``results summarize`` for runs that did not finish, ``results
                export`` for runs as MLPerf Storage-style rows)
    mpiutil.py  MPI patterns: work on rank 0 with errors raised everywhere, node
                communicators, array broadcasts; mpicompat.py: MPI stacks known to break
    sweep/      the ``sweep`` command: one train job per point, resumable: its spec (each
                key checked by one table, spec.py), the sweep directory (sweepdir.SweepDir,
                the one reader and writer of sweep.json, checked by measure/schema.py),
                the loop, the process supervisor, and the accelerators search (search.py,
                on explain/accelerators.py's bisection)
    simulate/   the ``simulate`` command: a SimGrid model of the platform (platform files
                in platforms/) replaying each reader's request pattern (``@pattern``
                beside the reader), calibrated on runs and validated on held-out rank
                counts; engine.py runs cases, topology.py builds hosts and links,
                actors.py holds the ranks' step loops, costs.py what their work costs;
                predict.py: the validation, templates, points, accelerators supported;
                its prediction written and read by explain/prediction.py
    mapfault.py  a fault in a mapped shard turned into a line naming the shard
    outputs.py  where a command may write: never into a run or dataset directory,
                never over a file hpcio did not write (each command recognises its own)
    cli.py, errors.py, fsutil.py, progress.py    argument types, the command table and
                the options commands share, one-line errors, atomic files, progress on
                rank 0 (a bar on a terminal, plain lines in a log)
    __main__.py  ``hpcio COMMAND`` / ``python -m hpcio COMMAND``: every command by name

A new format is a module in formats/ added to FORMATS; a new reader a class in readers/
decorated with ``@register``; a new per-step figure a column in measure/steps.py and its
summary in explain/summary.py; a new command a module with ``main`` run under
``errors.guard``, a ``build_parser`` that imports nothing heavy (a usage error asks every
command's parser whose option it was), and its line in ``cli.COMMANDS``.

The layers, lowest first (a package imports only from those below it; no private name
crosses modules; tests/test_layering.py checks both): errors; fsutil, mpiutil, plan,
progress; data, measure, cache, workloads; formats, explain; readers; cli, outputs; train;
the other commands (checkpoint among them) (the sweep reads its train options with train's own parser); __main__.

Imports are deferred into functions only for a heavy library, each with its reason in a
comment: mpi4py (importing it initialises MPI), torch (seconds; the training modules'
options, model names and exchange sizes load without it), h5py (HDF5's library, for HDF5
data only), and the optional ones: matplotlib behind the analyze command's report (the
``[analysis]`` extra, so a missing extra is one line), PyDarshan, pynvml, Horovod and
SimGrid; cli.py's shared groups import the readers (numpy) when called, so ``hpcio --help``
loads the command table alone. Dataset tools and the analysis start without MPI or torch.
Every other import is at the top of its module; tests/test_layering.py holds the list
(``DEFERRED``), and no function is longer than 100 lines.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
