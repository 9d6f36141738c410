"""ROMIO / MPI-IO hints as readers pass them to MPI (``--hint cb_nodes=2 --hint
romio_cb_read=enable`` on the command line, :func:`hpcio.cli.parse_key_values`).

The hints that matter for reading (ROMIO): ``romio_cb_read`` (enable/disable/automatic
two-phase collective reads), ``cb_nodes`` (number of aggregators), ``cb_config_list``
(aggregators per host: ROMIO's default ``*:1`` makes one rank per node read everything and
ship it to the others; ``*:*`` lets every rank aggregate), ``cb_buffer_size`` (bytes an
aggregator reads per round), ``romio_ds_read`` (data sieving for independent
noncontiguous reads) and ``ind_rd_buffer_size`` (its buffer).
"""

__all__ = ["mpi_info", "file_hints"]


def mpi_info(hints):
    """An ``MPI.Info`` holding ``hints`` (``MPI.INFO_NULL`` when empty); free it after use."""
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    if not hints:
        return MPI.INFO_NULL
    info = MPI.Info.Create()
    for k, v in hints.items():
        info.Set(k, v)
    return info


def file_hints(fh, keys=None):
    """The hints an open ``MPI.File`` really uses (ROMIO fills in its defaults)."""
    info = fh.Get_info()
    try:
        names = [info.Get_nthkey(i) for i in range(info.Get_nkeys())]
        return {k: info.Get(k) for k in names if keys is None or k in keys}
    finally:
        info.Free()
