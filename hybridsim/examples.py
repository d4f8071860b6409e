"""``hybridsim example list|copy NAME DIR``: the shipped example scenarios, reachable from an installed wheel.

The examples live in the repository's ``examples/`` folder. A wheel carries a copy of that folder as
``hybridsim/_examples/`` (``setup.py``'s ``build_py`` adds it), so an installed package finds them beside this module;
a source checkout or an editable install finds the checkout's ``examples/`` one folder up. :func:`examples_dir` is the
one place that decides which. A name is a path inside that folder without ``.yaml`` (``quickstart``,
``machines/haswell-ep``); ``policies/every_other`` is the example plug-in policy (a ``.py`` file).
"""

from __future__ import annotations

import difflib
import shutil
import sys
from pathlib import Path

from hybridsim_common.errors import EXIT_OK, CliError

#: the suffixes of the files an example may be (scenarios and machine models; the example plug-in policy)
SUFFIXES = (".yaml", ".py")


def examples_dir() -> Path:
    """The folder of the shipped examples: the wheel's ``hybridsim/_examples``, else the checkout's ``examples/``."""
    here = Path(__file__).resolve().parent
    for d in (here / "_examples", here.parent / "examples"):
        if (d / "quickstart.yaml").is_file():
            return d
    raise CliError(f"no examples found beside {here} (neither _examples/ in the installed package nor examples/ "
                   f"in a source checkout); reinstall hybridsim")


def list_examples() -> dict[str, Path]:
    """Every example by name (its path inside the examples folder without the suffix), sorted."""
    root = examples_dir()
    out = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in SUFFIXES and f.name != "__init__.py" and "__pycache__" not in f.parts:
            out[f.relative_to(root).with_suffix("").as_posix()] = f
    return out


def summary(path: Path) -> str:
    """The first line of an example's opening comment (YAML ``#``) or docstring (Python)."""
    for line in path.read_text().splitlines():
        s = line.strip().lstrip("#").strip().strip('"').strip()
        if s:
            return s
    return ""


def copy_example(name: str, dest: str | Path, *, force: bool = False) -> Path:
    """Copy the example ``name`` into the folder ``dest`` (made if missing); returns the written file. An existing
    file is replaced only with ``force``; an unknown name is refused with the closest names."""
    known = list_examples()
    src = known.get(name.removesuffix(".yaml").removesuffix(".py"))
    if src is None:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise CliError(f"no example named {name!r}{hint} (`hybridsim example list` names them all)")
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise CliError(f"{dest}: exists and is not a folder")
    target = dest / src.name
    if target.exists() and not force:
        raise CliError(f"{target}: exists (use --force to replace it)")
    try:
        dest.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        shutil.copyfile(src, partial)
        partial.replace(target)
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None
    return target


def cmd_example(args) -> int:
    if args.action == "list":
        known = list_examples()
        width = max(len(n) for n in known)
        for name, path in known.items():
            line = summary(path)
            print(f"{name:<{width}}  {line if len(line) <= 80 else line[:77] + '...'}")
        return EXIT_OK
    if not args.name or not args.dir:
        raise CliError("example copy: give NAME and DIR (`hybridsim example copy quickstart my-study`)")
    target = copy_example(args.name, args.dir, force=args.force)
    print(f"{target}", file=sys.stdout)
    return EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("example", help="list the shipped example scenarios or copy one into a folder",
                       description="hybridsim example list | hybridsim example copy NAME DIR [--force]")
    p.add_argument("action", choices=("list", "copy"))
    p.add_argument("name", nargs="?", metavar="NAME", help="an example's name, as `list` prints it")
    p.add_argument("dir", nargs="?", metavar="DIR", help="the folder to copy it into (made if missing)")
    p.add_argument("--force", action="store_true", help="replace a file of the same name in DIR")
    p.set_defaults(func=cmd_example)
