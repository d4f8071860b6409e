"""The native core's home: ``core.cpp`` (C++17, pybind11) and, once built, the extension ``_core`` it compiles to
(``pip install -e .`` or ``python setup.py build_ext --inplace``; optional). :mod:`hybridsim.engine.cores` wires it
behind :class:`~hybridsim.engine.Engine`; this package imports nothing."""
