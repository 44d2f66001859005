"""Finite elements (PXI): a mesh model written and read in parallel, Exodus II files.

:mod:`sdm.fem.model` (the in-memory model), :mod:`sdm.fem.store` (stored in SDM),
:mod:`sdm.fem.exodus` (Exodus II files, NetCDF-4 flavour, written with netCDF4); a run's
export to Exodus II and the import of one are :mod:`sdm.exporting.exodus`.
"""
