"""Ranks started by MPI's mpiexec/mpirun instead of torchrun: environment.py numbers them (docs/running.md, "MPI")."""
