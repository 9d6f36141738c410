"""Datasets as formats and readers rely on them: the contract (manifest + record index,
:mod:`.dataset`), record checksums (:mod:`.checksum`), synthetic pictures and their
encodings (:mod:`.pictures`) and presets (:mod:`.presets`).

Formats (:mod:`hpcio.formats`) and readers (:mod:`hpcio.readers`) import from here, so this
package imports neither of them, nor what makes datasets (:mod:`hpcio.datagen`): only
hpcio's errors, file and MPI helpers.
"""
