"""hybridsim: hybrid PDES-surrogate simulation of Dragonfly HPC interconnects."""

__version__ = "0.1.0"
