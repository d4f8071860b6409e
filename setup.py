"""Build hook for the optional native core of the embedded engine (``hybridsim.engine.native._core``).

Everything else about the package lives in pyproject.toml. The extension is optional: without a C++17 compiler (or
pybind11) ``pip install`` still succeeds and the engine runs its pure-Python core (``backend.embedded.core: auto``).
Floating point: ``-ffp-contract=off`` and no ``-ffast-math``, so every double the native core computes is the one the
Python engine computes (no fused multiply-add, no reassociation): its records are identical, not close.
"""

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

try:
    from pybind11.setup_helpers import Pybind11Extension
except ImportError:  # no pybind11: no native core (the optional extension is skipped)
    Pybind11Extension = None

#: the native core, one concern a file (core.hpp declares the class they define), compiled as one extension
NATIVE = "hybridsim/engine/native"
SOURCES = ("heap", "network", "mpi", "predicted", "sampling", "bindings")

ext_modules = []
if Pybind11Extension is not None:
    args = ["/O2", "/fp:precise"] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-fast-math"]
    ext_modules.append(Pybind11Extension("hybridsim.engine.native._core", [f"{NATIVE}/{name}.cpp" for name in SOURCES],
                                         depends=[f"{NATIVE}/core.hpp"], cxx_std=17, extra_compile_args=args,
                                         optional=True))

setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext})
