"""Bounded, strict YAML reading for scenario files -- the one home of these checks, for files (``hybridsim run``,
machine files) and for text a client sends (the remote engine service passes its operator limits as a
:class:`YamlLimits` whose ``knobs`` name its own flags).

A scenario file is read as UTF-8 of at most :attr:`YamlLimits.max_bytes`, composed with a depth bound
(:attr:`YamlLimits.max_depth`; PyYAML's composers recurse once per level) and then checked as a node tree before any
Python object is built: its alias-expanded size (``&a``/``*a`` chains, the "billion laughs") against
:attr:`YamlLimits.max_nodes`, recursive aliases, duplicate mapping keys, non-finite floats (``.inf``, ``.nan``,
``1e999``) and integers beyond 64 bits. Every error is a :class:`YamlInputError` naming file:line:column and the path
of the field. :func:`locate` maps a field path (a pydantic error location) back to its node; :func:`where` names a
node's ``file:line:column``; a :class:`Provenance` keeps a loaded document's file and tree (or the text it composes
the tree from on demand, :class:`YamlText`) so any layer (the scenario, the machine model) can locate a field without
importing the scenario module. :class:`ScenarioError` is the located
error every layer raises for bad input (re-exported by :mod:`hybridsim.scenario`).

Parsing: libyaml's C parser and composer (PyYAML's ``CSafeLoader``, some fifteen times faster than the pure-Python one
on a stream of thousands of jobs) build the node tree; the checks, the construction and every message stay PyYAML's own.
Whatever the C path cannot vouch for -- text that is not valid YAML, or a tree as deep as ``max_depth`` (the C
composer does not say where it went too deep) -- is parsed again by the pure-Python parser, so each message, its
``file:line:column`` included, is the one it has always been. Without libyaml (a PyYAML built without it) the pure
parser does everything, and one warning line says so.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT64 = 2**63


#: how messages name each bound for ``hybridsim run/validate`` (``--limit``)
_CLI_KNOBS = {"max_bytes": "limit yaml_bytes; raise it with --limit yaml_bytes=N", "max_depth": "limit yaml_depth",
              "max_nodes": "limit yaml_nodes"}


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on the YAML text itself (the scenario cannot raise these: they apply before it is read; use
    ``--limit yaml_bytes=...`` and friends). ``knobs``: how an error message names each bound and its setting (a
    server passes its own flags)."""

    max_bytes: int = 4 * 2**20
    max_depth: int = 64
    max_nodes: int = 1_000_000
    knobs: dict = field(default_factory=lambda: dict(_CLI_KNOBS), compare=False)

    #: ``--limit`` names of the fields
    CLI_NAMES = {"yaml_bytes": "max_bytes", "yaml_depth": "max_depth", "yaml_nodes": "max_nodes"}

    def updated(self, overrides: dict) -> "YamlLimits":
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for cli, attr in self.CLI_NAMES.items():
            if cli in overrides:
                kw[attr] = overrides[cli]
        return YamlLimits(**kw)

    def knob(self, attr: str) -> str:
        return self.knobs.get(attr) or _CLI_KNOBS[attr]


class ScenarioError(ValueError):
    """A scenario (or a file it names) could not be loaded. ``str()`` is the full human-readable message;
    ``problems``: one located line per problem."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


class YamlText:
    """A checked document's text and bounds, which a :class:`Provenance` keeps in place of the node tree. The tree
    is needed only when a message names a place, and a stream of thousands of jobs is some 400,000 nodes (over
    100 MB, and work for the garbage collector for as long as they live): it is composed again from the text on first
    use, once (the text passed every check already, so it composes to the same tree)."""

    __slots__ = ("text", "limits", "_root")

    def __init__(self, text: str, limits: "YamlLimits"):
        self.text, self.limits, self._root = text, limits, None

    def root(self, filename: str) -> yaml.Node | None:
        if self._root is None:
            with gc_paused():
                self._root, loader = _compose(self.text, filename, self.limits)
                loader.dispose()
        return self._root

    def __deepcopy__(self, memo):
        return self


class _TreeField:
    """``Provenance.root``: the tree given to the constructor, else the one its ``text`` composes (on first use)."""

    def __get__(self, obj, owner=None):
        if obj is None:
            return None  # the field's default
        root = obj.__dict__.get("_root")
        if root is None and obj.text is not None:
            root = obj.text.root(obj.name)
        return root

    def __set__(self, obj, value):
        obj.__dict__["_root"] = value


@dataclass(frozen=True)
class Provenance:
    """Where a loaded document came from: ``path`` (the resolved file, None for text or a generated scenario),
    ``filename`` (the name error messages use) and ``root`` (the composed YAML tree, which locates fields; given, or
    composed from ``text``, a :class:`YamlText`, when first asked for). Immutable and shared by copies (``deepcopy``
    returns it as is), so a copied scenario keeps its origin without copying it by hand."""

    path: Path | None = None
    filename: str | None = None
    root: yaml.Node | None = _TreeField()
    text: YamlText | None = field(default=None, repr=False, compare=False)

    def __deepcopy__(self, memo):
        return self

    @property
    def name(self) -> str:
        return self.filename or (str(self.path) if self.path is not None else "<scenario>")

    @property
    def base_dir(self) -> Path:
        """The folder relative paths in the document are resolved against (the working directory for text)."""
        return self.path.parent if self.path is not None else Path.cwd()

    def where(self, loc: tuple) -> str:
        """``file:line:column`` of the field at ``loc`` (as near as the tree goes), or the file name."""
        node = locate(self.root, loc) if self.root is not None else None
        return where(self.name, node) if node is not None else self.name

    def where_key(self, loc: tuple) -> str:
        """Like :meth:`where`, at the key of the field (for unknown or extra keys)."""
        node = locate_key(self.root, loc) if self.root is not None else None
        return where(self.name, node) if node is not None else self.name


class YamlInputError(ValueError):
    """The text is not acceptable YAML for a scenario; ``problems`` are located one-line messages."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def where(filename: str, node_or_mark) -> str:
    mark = getattr(node_or_mark, "start_mark", node_or_mark)
    return f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark is not None else filename


def read_text(path: str | Path, limits: YamlLimits = YamlLimits()) -> str:
    """The file's text; too large, unreadable or not UTF-8 -> :class:`YamlInputError` (never more than
    ``max_bytes + 1`` bytes are read, and only from a regular file: a FIFO or /dev/zero is refused)."""
    from .files import open_regular

    path = Path(path)
    try:
        with open_regular(path) as fh:  # a FIFO or a device is refused, not waited on
            data = fh.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise YamlInputError([f"{path}: no such file"]) from None
    except OSError as exc:
        raise YamlInputError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    if len(data) > limits.max_bytes:
        raise YamlInputError([f"{path}: file is larger than {limits.max_bytes} bytes ({limits.knob('max_bytes')})"])
    return decode_utf8(data, str(path))


def decode_utf8(data: bytes, filename: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise YamlInputError([f"{filename}:{line}:{col}: not UTF-8 text (byte 0x{data[exc.start]:02x})"]) from None


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer stops at ``max_depth`` nesting levels instead of exhausting the Python stack."""

    def __init__(self, stream, max_depth: int):
        super().__init__(stream)
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                raise _TooDeep(self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _TooDeep(Exception):
    def __init__(self, mark):
        self.mark = mark


#: nesting bound above which the C composer is not used: it recurses on the C stack (a few thousand levels are
#: safe; a hundred thousand crash the process), so a larger ``max_depth`` reads with the pure parser
_C_MAX_DEPTH = 1000

if getattr(yaml, "__with_libyaml__", False):
    class _CLoader(yaml.CSafeLoader):
        """libyaml's parser and composer. The C composer calls back into Python once per node, on the way down and
        up (``descend_resolver``/``ascend_resolver``: path resolvers, which a safe loader has none of), so the depth
        is counted there; the composer is stopped at ``max_depth`` levels (aliases are not counted there, so a tree
        that deep is handed to the pure parser, which knows the exact place and rule)."""

        def __init__(self, stream, max_depth: int):
            super().__init__(stream)
            self._depth = 0
            self._max_depth = max_depth

        def descend_resolver(self, parent, index):
            self._depth += 1
            if self._depth >= self._max_depth:
                raise _TooDeep(None)

        def ascend_resolver(self):
            self._depth -= 1
else:  # pragma: no cover (PyYAML built without libyaml)
    _CLoader = None

_warned_pure = False


def _compose(text: str, filename: str, limits: YamlLimits):
    """The node tree of ``text`` (None for an empty document) and the loader that composed it (it constructs the
    tree). The C path first; the pure parser for everything the C path does not accept (see the module docstring)."""
    global _warned_pure
    if _CLoader is not None and limits.max_depth <= _C_MAX_DEPTH:
        loader = _CLoader(text, limits.max_depth)
        try:
            return loader.get_single_node(), loader
        except (_TooDeep, yaml.YAMLError):
            loader.dispose()  # the pure parser below says what is wrong and where, as it always has
    elif _CLoader is None and not _warned_pure:
        _warned_pure = True
        print("hybridsim: warning: PyYAML has no libyaml (yaml.CSafeLoader); reading YAML with the pure-Python parser, "
              "several times slower on large files", file=sys.stderr)
    loader = _Loader(text, limits.max_depth)
    try:
        return loader.get_single_node(), loader
    except _TooDeep as exc:
        loader.dispose()
        raise YamlInputError([f"{where(filename, exc.mark)}: YAML nested deeper than {limits.max_depth} levels "
                              f"({limits.knob('max_depth')})"]) from None
    except yaml.YAMLError as exc:
        loader.dispose()
        raise YamlInputError([_yaml_error(exc, filename)]) from None


def _check_characters(text: str, filename: str) -> None:
    """The characters YAML allows (PyYAML's reader check, for either parser: libyaml is handed UTF-8, in which a lone
    surrogate cannot be written)."""
    try:
        yaml.reader.Reader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (NUL, most control characters)
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise YamlInputError([f"{filename}:{line}:{col}: character #x{exc.character:04x} is not allowed in YAML "
                              "text"]) from None


@contextlib.contextmanager
def gc_paused():
    """For performance: Python's cyclic garbage collector paused while a document's objects are built. A stream of
    18,000 jobs is some 400,000 nodes and as many dicts and models, none of them in a cycle, and the collector's
    repeated passes over that growing heap cost three quarters of the time of reading it. Reference counting still
    frees everything; a cycle (a recursive alias) is collected after the pause. The switch is process-wide: a pause
    another thread ends early only costs that thread the speed-up."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def load(text: str, filename: str, limits: YamlLimits = YamlLimits()):
    """Compose, check and construct ``text``. Returns ``(data, root node)`` (both ``None`` for an empty file)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise YamlInputError([f"{filename}: {size} bytes of YAML text is more than {limits.max_bytes} bytes "
                              f"({limits.knob('max_bytes')})"])
    _check_characters(text, filename)
    with gc_paused():
        return _load_checked(text, filename, limits)


def _load_checked(text: str, filename: str, limits: YamlLimits):
    root, loader = _compose(text, filename, limits)
    try:
        if root is None:
            return None, None
        check_tree(root, filename, limits, loader)
        try:
            data = loader.construct_document(root)
        except yaml.YAMLError as exc:
            raise YamlInputError([_yaml_error(exc, filename)]) from None
        except (ValueError, OverflowError) as exc:  # e.g. an impossible date such as 2001-13-45
            raise YamlInputError([f"{filename}: YAML value error: {exc}"]) from None
        return data, root
    finally:
        loader.dispose()


def _yaml_error(exc: yaml.YAMLError, filename: str) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    ctx = getattr(exc, "context", None)
    return f"{where(filename, mark)}: YAML syntax error: {problem}" + (f" ({ctx})" if ctx else "")


def _children(node) -> list[tuple[object, yaml.Node]]:
    """(path part, child) pairs; a mapping's keys count as nodes too (part None)."""
    if isinstance(node, yaml.MappingNode):
        out = []
        for k, v in node.value:
            out.append((None, k))
            out.append((k.value if isinstance(k, yaml.ScalarNode) else "?", v))
        return out
    if isinstance(node, yaml.SequenceNode):
        return list(enumerate(node.value))
    return []


def _fmt_path(path: tuple) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def check_tree(root: yaml.Node, filename: str, limits: YamlLimits, loader: yaml.SafeLoader) -> None:
    """Iterative walk (no recursion: depth is bounded, but stay safe) visiting each distinct node once, in document
    order: duplicate keys, non-finite floats, 64-bit integer range, recursive aliases and the alias-expanded node
    count. Problems are listed in document order; a recursive alias or too many nodes stops the walk."""
    problems: list[str] = []
    size: dict[int, int] = {}      # id of a finished collection -> its alias-expanded node count (a scalar counts 1)
    active: set[int] = set()       # collections on the current path (an alias to one of them is recursive)
    reported: set[int] = set()     # scalars already reported (an aliased scalar is reported once)

    def scalar(node: yaml.ScalarNode, path: tuple) -> None:
        if (node.tag == _INT_TAG or node.tag == _FLOAT_TAG) and id(node) not in reported:
            msg = _scalar_problem(node, loader)
            if msg:
                reported.add(id(node))
                problems.append(f"{where(filename, node)}: {_fmt_path(path)}: {msg}")

    def enter(node: yaml.Node, path: tuple) -> list:
        active.add(id(node))
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for k, _v in node.value:
                if not isinstance(k, yaml.ScalarNode) or k.tag == _MERGE_TAG:
                    continue
                key = (k.tag, k.value)
                if key in seen:
                    problems.append(f"{where(filename, k)}: {_fmt_path(path + (k.value,))}: duplicate key "
                                    f"{k.value!r} (first at line {seen[key].start_mark.line + 1})")
                else:
                    seen[key] = k
        return [node, path, iter(_children(node)), 1]   # the last item: nodes counted so far

    if isinstance(root, yaml.ScalarNode):
        scalar(root, ())
        stack = []
    else:
        stack = [enter(root, ())]
    # for performance (a stream scenario has hundreds of thousands of nodes): scalars are checked where their
    # collection lists them, only collections go on the stack
    while stack:
        frame = stack[-1]
        path = frame[1]
        for part, child in frame[2]:
            if isinstance(child, yaml.ScalarNode):
                frame[3] += 1
                if child.tag == _INT_TAG or child.tag == _FLOAT_TAG:
                    scalar(child, path if part is None else path + (part,))
                continue
            cid = id(child)
            if cid in size:
                frame[3] += size[cid]
                continue
            cpath = path if part is None else path + (part,)
            if cid in active:
                raise YamlInputError(problems + [f"{where(filename, child)}: {_fmt_path(cpath)}: recursive YAML alias"])
            stack.append(enter(child, cpath))
            break
        else:
            stack.pop()
            node, n = frame[0], frame[3]
            active.discard(id(node))
            size[id(node)] = n
            if n > limits.max_nodes:
                raise YamlInputError(problems + [
                    f"{where(filename, node)}: {_fmt_path(path)}: YAML has more than {limits.max_nodes} nodes once "
                    f"aliases are expanded ({limits.knob('max_nodes')})"])
            if stack:
                stack[-1][3] += n
    if problems:
        raise YamlInputError(problems)


def _scalar_problem(node: yaml.ScalarNode, loader: yaml.SafeLoader) -> str | None:
    if node.tag == _FLOAT_TAG:
        if not math.isfinite(loader.construct_yaml_float(node)):
            return f"{node.value!r} is not a finite number"
    elif node.tag == _INT_TAG:
        v = node.value
        if v.isascii() and v.isdigit() and len(v) < 19 and (len(v) == 1 or v[0] != "0"):
            return None  # for performance: a plain decimal of at most 18 digits (no octal, sign, '_' or ':')
        try:
            v = loader.construct_yaml_int(node)
        except ValueError:
            v = None
        if v is None or not -_INT64 <= v < _INT64:
            return "integer out of range (it must fit in 64 bits)"
    return None


def locate(root: yaml.Node | None, loc: tuple) -> yaml.Node | None:
    """Follow a field path through the composed tree; the deepest node reached (discriminated-union tags such as
    ``milc``, which are not YAML keys, are skipped)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.value == part:
                    node = v
                    break
            else:
                return node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
    return node


def locate_key(root: yaml.Node | None, loc: tuple) -> yaml.Node | None:
    """The key node of the field at ``loc`` (for unknown keys), else its parent."""
    parent = locate(root, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _v in parent.value:
            if k.value == loc[-1]:
                return k
    return parent


# ------------------------------------------------------------------------------------------ pydantic errors, located
def format_validation_error(exc, root: yaml.Node | None, filename: str, model, prefix: tuple = (),
                            label: str = "") -> list[str]:
    """Located messages ``file:line:col: path: message`` for a pydantic ``ValidationError`` of ``model`` whose data
    sits at ``prefix`` in the YAML tree ``root`` (the scenario's, a machine file's). An unknown key names the valid
    keys of the model that owns it and the closest one; any other error gives pydantic's message and the value read.
    ``label`` (e.g. ``"(job 'a', kernel 'k')"``) is added after the path."""
    import difflib

    problems = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        full = prefix + loc
        path = ".".join(str(p) for p in full) or "<top level>"
        etype = err.get("type", "")
        if etype == "extra_forbidden":
            node = locate_key(root, full)
            owner = model_at(model, loc)
            valid = [f.alias or n for n, f in owner.model_fields.items()] if owner is not None else []
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            msg = f"unknown key {loc[-1]!r}{hint}" + (f" (valid keys: {', '.join(valid)})" if valid else "")
        else:
            node = locate(root, full)
            msg = err.get("msg", "invalid value")
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, "):]
            if etype == "missing":
                msg = "required field is missing"
            inp = err.get("input")
            if etype != "missing" and not isinstance(inp, (dict, list)) and inp is not None \
                    and repr(inp) not in msg:
                msg += f" (got {inp!r})"
        problems.append(f"{where(filename, node)}: {path}{(' ' + label) if label else ''}: {msg}")
    return problems


def model_at(model, loc: tuple):
    """The pydantic model class that owns the last key of ``loc`` below ``model`` (None where the path leaves the
    models). List indices and dict keys (``DP``) keep the owner; a discriminated union's tag (``milc``, which pydantic
    puts in the location) selects the member of the union whose discriminator allows it."""
    import typing

    owner, members = model, [model]
    for part in loc[:-1]:
        if isinstance(part, int) or owner is None:
            continue
        field_ = next((f for n, f in owner.model_fields.items() if part in (n, f.alias)), None)
        if field_ is not None:
            members = _models_in(field_.annotation)
            owner = members[0] if members else None
            continue
        tagged = [m for m in members if any(part in typing.get_args(f.annotation) for f in m.model_fields.values()
                                            if typing.get_origin(f.annotation) is typing.Literal)]
        if tagged:
            owner = tagged[0]
    return owner


def _models_in(annotation) -> list:
    """The pydantic model classes an annotation names (``list[Job]``, ``Optional[X]``, a union of workloads)."""
    import typing

    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
