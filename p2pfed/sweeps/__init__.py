"""Sweeps: grids of methods × swept scenario values × seeds, run as Dask tasks, aggregated with CIs.

``spec`` reads and checks sweep files, ``cells`` expands the grid and keys each run by the hash
of its resolved scenario, ``store`` lays out the output folder, ``execute`` runs cells on Dask,
``aggregate`` and ``plots`` turn cell folders into tables and figures, ``report`` writes them,
``run`` ties one sweep together and ``cli`` adds ``p2pfed sweep`` / ``p2pfed report``.
"""
