"""Datasets: the contract readers rely on (manifest + record index, :mod:`.dataset`),
writing them (:mod:`.write`), synthetic pictures and presets, imports and indexes of data
made elsewhere (:mod:`.importers`), and the ``datagen`` command (:mod:`.cli`).

Formats (:mod:`hpcio.formats`) import from here, so this package imports nothing itself.
"""
