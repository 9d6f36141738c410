"""Making datasets: writing them in any format (:mod:`.write`), imports and indexes of data
made elsewhere (:mod:`.importers`), and the ``datagen`` command (:mod:`.command`,
``python -m hpcio.datagen``).

This package sits above :mod:`hpcio.formats` (it writes and indexes through the format
registry), which sits above :mod:`hpcio.data` (the dataset contract formats and readers
rely on): the contract never imports what makes datasets.
"""
