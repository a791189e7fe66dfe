"""Stands in for mpi4py where a test runs the way a machine without mpi4py would: importing it
fails as a missing package does (tests/python/CMakeLists.txt puts this folder first on PYTHONPATH)."""
raise ImportError("mpi4py is hidden by tests/python/without_mpi4py")
