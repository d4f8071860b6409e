"""Build hook for the optional native core of the embedded engine (``hybridsim.engine.native._core``).

Everything else about the package lives in pyproject.toml, but for one copy: ``build_py`` also puts the
repository's ``examples/`` into the package as ``hybridsim/_examples/`` (``hybridsim example``). The extension is optional: without a C++17 compiler (or
pybind11) ``pip install`` still succeeds and the engine runs its pure-Python core (``backend.embedded.core: auto``).
Floating point: ``-ffp-contract=off`` and no ``-ffast-math``, so every double the native core computes is the one the
Python engine computes (no fused multiply-add, no reassociation): its records are identical, not close.
"""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

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

EXAMPLES = Path(__file__).resolve().parent / "examples"


class build_py_with_examples(build_py):
    """Also copy the repository's ``examples/`` (scenarios, machine models, the example policy) into the package as
    ``hybridsim/_examples/``, where ``hybridsim example`` finds them in an installed wheel (hybridsim/examples.py)."""

    def example_files(self):
        return [f for f in sorted(EXAMPLES.rglob("*"))
                if f.is_file() and f.suffix in (".yaml", ".py") and "__pycache__" not in f.parts]

    def run(self):
        super().run()
        for f in self.example_files():
            target = Path(self.build_lib) / "hybridsim" / "_examples" / f.relative_to(EXAMPLES)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [
            str(Path(self.build_lib) / "hybridsim" / "_examples" / f.relative_to(EXAMPLES)) for f in self.example_files()]


setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext, "build_py": build_py_with_examples})
