"""The native core's home: ``core.hpp`` (the class and its model objects) and its sources, one concern a file
(``heap.cpp``, ``network.cpp``, ``mpi.cpp``, ``predicted.cpp``, ``sampling.cpp``, ``bindings.cpp``; C++17, pybind11)
and, once built, the extension ``_core`` they compile to (``pip install -e .`` or ``python setup.py build_ext
--inplace``; optional). :mod:`hybridsim.engine.cores` wires it behind :class:`~hybridsim.engine.Engine`; this package
imports nothing."""
