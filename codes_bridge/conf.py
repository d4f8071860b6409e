"""CODES ``.conf`` files (``LPGROUPS { GRP { key="v"; } }  PARAMS { key="v"; list=( "a","b" ); }``).

:func:`parse_conf` returns a :class:`CodesConf`: ``sections`` maps each top-level section to a dict of keys (nested
sections become nested dicts); values are strings or lists of strings exactly as written. Every key remembers its
line so that later checks can say ``file:line``. Syntax errors raise :class:`ConfError` with ``file:line``.

Comments: ``#`` to end of line (CODES' configuration lexer also accepts ``//``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from hybridsim_common.topology import DragonflyShape


#: sanity bounds on a .conf read from disk (a corrupt file must not make the importer allocate terabytes)
MAX_ROUTERS = 1_000_000
MAX_RADIX = 4_096
MAX_LPS = 50_000_000


class ConfError(ValueError):
    def __init__(self, path, line: int | None, message: str):
        self.path, self.line, self.message = str(path), line, message
        super().__init__(f"{path}:{line}: {message}" if line is not None else f"{path}: {message}")


_TOKEN = re.compile(r'\s*(?:(?P<str>"[^"\n]*")|(?P<sym>[{}();=,])|(?P<word>[A-Za-z0-9_.+\-/<>:@]+)|(?P<bad>\S))')


def _tokens(text: str, path):
    for line_no, line in enumerate(text.splitlines(), 1):
        # strip comments outside strings
        out, in_str = [], False
        i = 0
        while i < len(line):
            c = line[i]
            if c == '"':
                in_str = not in_str
            elif not in_str and (c == "#" or line.startswith("//", i)):
                break
            out.append(c)
            i += 1
        if in_str:
            raise ConfError(path, line_no, "unterminated string")
        s = "".join(out)
        pos = 0
        while pos < len(s):
            m = _TOKEN.match(s, pos)
            if m is None or m.end() == pos:
                break
            pos = m.end()
            if m.group("bad"):
                raise ConfError(path, line_no, f"unexpected character {m.group('bad')!r}")
            if m.group("str") is not None:
                yield ("str", m.group("str")[1:-1], line_no)
            elif m.group("sym") is not None:
                yield (m.group("sym"), m.group("sym"), line_no)
            elif m.group("word") is not None:
                yield ("word", m.group("word"), line_no)


@dataclass
class CodesConf:
    path: Path
    sections: dict = field(default_factory=dict)
    lines: dict = field(default_factory=dict)  # (section, ..., key) -> line

    # ---------------------------------------------------------------- access
    def section(self, name: str) -> dict:
        if name not in self.sections:
            raise ConfError(self.path, None, f"no {name} section")
        return self.sections[name]

    def has(self, key: str, section: str = "PARAMS") -> bool:
        return key in self.sections.get(section, {})

    def where(self, key: str, section: str = "PARAMS") -> str:
        n = self.lines.get((section, key))
        return f"{self.path}:{n}" if n is not None else str(self.path)

    def get(self, key: str, default=None, section: str = "PARAMS"):
        return self.sections.get(section, {}).get(key, default)

    def get_str(self, key: str, default: str | None = None, section: str = "PARAMS") -> str:
        v = self.get(key, None, section)
        if v is None:
            if default is None:
                raise ConfError(self.path, None, f"{section} lacks required key {key!r}")
            return default
        if isinstance(v, list):
            raise ConfError(self.path, self.lines.get((section, key)), f"{key}: expected a single value, got a list")
        return v

    def get_float(self, key: str, default: float | None = None, section: str = "PARAMS") -> float:
        v = self.get(key, None, section)
        if v is None:
            if default is None:
                raise ConfError(self.path, None, f"{section} lacks required key {key!r}")
            return float(default)
        try:
            return float(self.get_str(key, section=section))
        except ValueError:
            raise ConfError(self.path, self.lines.get((section, key)), f"{key}: expected a number, got {v!r}") from None

    def get_int(self, key: str, default: int | None = None, section: str = "PARAMS") -> int:
        x = self.get_float(key, default, section)
        if x != int(x):
            raise ConfError(self.path, self.lines.get((section, key)), f"{key}: expected an integer, got {x}")
        return int(x)

    # ---------------------------------------------------------------- dragonfly-dally specifics
    def lp_groups(self) -> list[tuple[str, int, list[tuple[str, int]]]]:
        """``[(group name, repetitions, [(lp type, count), ...]), ...]`` in file order."""
        out = []
        for gname, body in self.section("LPGROUPS").items():
            if not isinstance(body, dict):
                raise ConfError(self.path, self.lines.get(("LPGROUPS", gname)), f"LPGROUPS.{gname} is not a group")
            reps = None
            types = []
            for k, v in body.items():
                line = self.lines.get(("LPGROUPS", gname, k))
                try:
                    n = int(v)
                except (TypeError, ValueError):
                    raise ConfError(self.path, line, f"LPGROUPS.{gname}.{k}: expected an integer, got {v!r}") from None
                if k == "repetitions":
                    reps = n
                else:
                    types.append((k, n))
            if reps is None:
                raise ConfError(self.path, self.lines.get(("LPGROUPS", gname)), f"LPGROUPS.{gname} lacks repetitions")
            out.append((gname, reps, types))
        return out

    def shape(self) -> DragonflyShape:
        keys = ("num_groups", "num_routers", "num_cns_per_router", "num_global_channels")
        vals = [self.get_int(k) for k in keys]
        for k, v in zip(keys, vals):
            if v < (0 if k == "num_global_channels" else 1):
                raise ConfError(self.path, self.lines.get(("PARAMS", k)), f"{k}: must be positive, got {v}")
        if vals[0] * vals[1] > MAX_ROUTERS or vals[1] + vals[2] + vals[3] > MAX_RADIX:
            raise ConfError(self.path, self.lines.get(("PARAMS", "num_groups")),
                            f"implausible dragonfly: {vals[0]} groups x {vals[1]} routers, radix "
                            f"{vals[1] - 1 + vals[2] + vals[3]} (limits {MAX_ROUTERS} routers, radix {MAX_RADIX})")
        return DragonflyShape(*vals)

    def bandwidths(self) -> tuple[float, float, float]:
        """(local, global, terminal) GiB/s."""
        return (self.get_float("local_bandwidth"), self.get_float("global_bandwidth"), self.get_float("cn_bandwidth"))

    def connection_files(self, run_dir: str | os.PathLike | None = None) -> tuple[Path, Path] | None:
        """(intra, inter) connection files named in PARAMS, resolved against the run directory and its parents
        (``<codes-src>/...`` placeholders are searched by file name); None if not found."""
        out = []
        for key in ("intra-group-connections", "inter-group-connections"):
            v = self.get(key)
            if not isinstance(v, str):
                return None
            p = Path(v)
            roots = [Path(run_dir)] if run_dir is not None else []
            roots.append(self.path.parent)
            found = None
            for root in roots:
                for base in (root, root.parent, root.parent.parent):
                    for cand in ((base / p) if not p.is_absolute() else p, base / p.name):
                        if cand.is_file():
                            found = cand
                            break
                    if found:
                        break
                if found:
                    break
            if found is None:
                return None
            out.append(found)
        return out[0], out[1]

    def topology(self, run_dir: str | os.PathLike | None = None):
        """The :class:`hybridsim_common.topology.Dragonfly` of this config: from its connection files when they can be
        found, else CODES' generator arrangement."""
        from hybridsim_common.topology import Dragonfly

        files = self.connection_files(run_dir)
        if files is None:
            return Dragonfly(self.shape())
        return Dragonfly.from_codes_files(self.shape(), *files)

    def lp_layout(self) -> dict[str, list[int]]:
        """Global ROSS lpids of each LP type (CODES codes_mapping order: groups in file order, repetition-major,
        types in listed order)."""
        out: dict[str, list[int]] = {}
        base = 0
        groups = self.lp_groups()
        total = sum(reps * sum(max(n, 0) for _, n in types) for _, reps, types in groups)
        if total > MAX_LPS or any(reps < 0 or any(n < 0 for _, n in types) for _, reps, types in groups):
            raise ConfError(self.path, self.lines.get(("LPGROUPS",)), f"LPGROUPS: implausible LP counts ({total} "
                                                                     f"LPs; limit {MAX_LPS}, none negative)")
        for _, reps, types in groups:
            per = sum(n for _, n in types)
            for rep in range(reps):
                off = 0
                for name, n in types:
                    out.setdefault(name, []).extend(range(base + rep * per + off, base + rep * per + off + n))
                    off += n
            base += reps * per
        return out


def parse_conf_text(text: str, path="<string>") -> CodesConf:
    conf = CodesConf(Path(path))
    toks = list(_tokens(text, path))
    pos = 0
    last_line = toks[-1][2] if toks else 1

    def peek():
        return toks[pos] if pos < len(toks) else ("eof", None, last_line)

    def take(kind=None):
        nonlocal pos
        t = peek()
        if kind is not None and t[0] != kind:
            raise ConfError(path, t[2], f"expected {kind!r}, found {t[1] if t[1] is not None else 'end of file'!r}")
        pos += 1
        return t

    def parse_block(target: dict, prefix: tuple):
        # after '{' ... until '}'
        while True:
            t = peek()
            if t[0] == "}":
                take()
                return
            if t[0] == "eof":
                raise ConfError(path, t[2], f"missing '}}' closing {'.'.join(prefix)}")
            if t[0] not in ("word", "str"):
                raise ConfError(path, t[2], f"expected a key or section name, found {t[1]!r}")
            take()
            key, line = t[1], t[2]
            nxt = peek()
            if nxt[0] == "{":
                take()
                sub = target.setdefault(key, {})
                conf.lines[prefix + (key,)] = line
                parse_block(sub, prefix + (key,))
            elif nxt[0] == "=":
                take()
                v = peek()
                if v[0] == "(":
                    take()
                    items = []
                    while True:
                        it = peek()
                        if it[0] == ")":
                            take()
                            break
                        if it[0] not in ("str", "word"):
                            raise ConfError(path, it[2], f"{key}: expected a list item or ')', found {it[1]!r}")
                        take()
                        items.append(it[1])
                        if peek()[0] == ",":
                            take()
                    value = items
                elif v[0] in ("str", "word"):
                    take()
                    value = v[1]
                else:
                    raise ConfError(path, v[2], f"{key}: expected a value after '=', found {v[1]!r}")
                if peek()[0] != ";":
                    raise ConfError(path, line, f"{key}: missing ';' after the value")
                take()
                if key in target:
                    raise ConfError(path, line, f"duplicate key {key!r} (first at line {conf.lines.get(prefix + (key,))})")
                target[key] = value
                conf.lines[prefix + (key,)] = line
            else:
                raise ConfError(path, nxt[2], f"after {key!r} expected '=' or '{{', found {nxt[1]!r}")

    while peek()[0] != "eof":
        t = take()
        if t[0] not in ("word", "str"):
            raise ConfError(path, t[2], f"expected a section name, found {t[1]!r}")
        take("{")
        conf.lines[(t[1],)] = t[2]
        parse_block(conf.sections.setdefault(t[1], {}), (t[1],))
    return conf


def parse_conf(path: str | os.PathLike) -> CodesConf:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfError(p, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfError(p, None, f"not a text file (byte {exc.start} is not UTF-8)") from None
    return parse_conf_text(text, p)


@dataclass(frozen=True)
class CodesCommand:
    """The command line a CODES run was started with: ``command.txt``, or else the first line of CODES' stdout
    (model-net-mpi-replay prints its full command line there). ``source`` / ``line`` locate it for errors."""

    text: str
    source: Path
    line: int = 1

    def options(self) -> dict[str, str]:
        """``--key=value`` options (the last one wins, as in CODES' option parser)."""
        return dict(re.findall(r"--([A-Za-z_\-]+)=(\S+)", self.text))

    def number(self, key: str) -> float | None:
        """Option ``--key`` as a finite number (None if absent); a non-number raises :class:`ConfError`."""
        v = self.options().get(key)
        if v is None:
            return None
        try:
            x = float(v)
        except ValueError:
            x = float("nan")
        if not x == x or x in (float("inf"), float("-inf")):
            raise ConfError(self.source, self.line, f"--{key}={v[:40]}: expected a number")
        return x

    def conf_name(self) -> str | None:
        """The word after ``--`` (the network .conf)."""
        words = self.text.split()
        if "--" in words:
            i = words.index("--")
            if i + 1 < len(words):
                return words[i + 1]
        return None


def read_command(run_dir: str | os.PathLike) -> CodesCommand | None:
    """The run's command line (see :class:`CodesCommand`): command.txt, else the first line of CODES' stdout when
    it is the command; None without either. A command.txt that is not a command line raises :class:`ConfError`."""
    from .parsers.common import CodesParseError, find_file, numbered_lines, read_bytes

    d = Path(run_dir)
    cmd = d / "command.txt"
    if cmd.is_file():
        try:
            text = read_bytes(cmd).decode("utf-8")
        except UnicodeDecodeError:
            raise ConfError(cmd, None, "not a text file (expected the CODES command line)") from None
        except CodesParseError as exc:
            raise ConfError(cmd, None, exc.message) from None
        if not re.search(r"(^|\s)--[A-Za-z_\-]+=\S|(^|\s)--(\s|$)", text):
            raise ConfError(cmd, 1, "no CODES command line in it (expected e.g. model-net-mpi-replay --synch=1 ... "
                                    "-- <network.conf>)")
        return CodesCommand(text, cmd)
    mo = find_file(d / "model-output.txt")
    if mo is not None:  # a run directory made by hand: CODES prints its full command line first
        for _, line in numbered_lines(mo):
            if "model-net-" in line and re.search(r"\s--[A-Za-z_\-]+=\S", line):
                return CodesCommand(line, mo, 1)
            break
    return None


def find_network_conf(run_dir: str | os.PathLike) -> Path:
    """The dragonfly .conf of a run: the file named after ``--`` in the command line, else the only ``*.conf``
    with an LPGROUPS section."""
    d = Path(run_dir)
    cmd = read_command(d)
    name = cmd.conf_name() if cmd is not None else None
    if name is not None and (d / name).is_file():
        return d / name
    cands = [p for p in sorted(d.glob("*.conf"))  # regular files only: reading a FIFO waits for a writer
             if p.is_file() and "LPGROUPS" in p.read_text(errors="replace")]
    if len(cands) == 1:
        return cands[0]
    if not cands:
        raise ConfError(d, None, "no CODES network .conf (with LPGROUPS) found")
    raise ConfError(d, None, f"several network .conf files: {', '.join(p.name for p in cands)}; "
                             "command.txt should name one after '--'")


# ------------------------------------------------------------------------------------------------ workload list file
@dataclass(frozen=True)
class WorkloadLine:
    ranks: int
    app: str          # JSON path as written, or "synthetic1"... for synthetic background
    qos: int
    mean_interval: float
    line: int

    @property
    def is_synthetic(self) -> bool:
        return self.app.startswith("synthetic")


def parse_workloads_conf(path: str | os.PathLike) -> list[WorkloadLine]:
    """CODES ``--workload_conf_file``: ``<ranks> <app|json> <qos> <mean_interval>`` per line (qos/interval
    optional)."""
    p = Path(path)
    out = []
    try:
        text = p.read_text()
    except UnicodeDecodeError as exc:
        raise ConfError(p, None, f"not a text file (byte {exc.start} is not UTF-8)") from None
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        f = s.split()
        if len(f) < 2 or len(f) > 4:
            raise ConfError(p, n, f"expected '<ranks> <app> [<qos> <mean_interval>]', got {s[:120]!r}")
        app = f[1]
        if n == len(lines) and not text.endswith("\n") and not (app.endswith(".json") or app.startswith("synthetic")):
            # a cut-off last line would silently rename the job ("./lammps-32.json" -> "./lamm")
            raise ConfError(p, n, f"workload {app[:80]!r} is neither a .json file nor synthetic<N> and the line has "
                                  f"no newline: truncated file?")
        try:
            ranks = int(f[0])
            qos = int(f[2]) if len(f) > 2 else 0
            mi = float(f[3]) if len(f) > 3 else 0.0
        except ValueError:
            raise ConfError(p, n, f"bad number in {s[:120]!r}") from None
        if ranks < 1:
            raise ConfError(p, n, f"ranks must be >= 1, got {ranks}")
        out.append(WorkloadLine(ranks, f[1], qos, mi, n))
    if not out:
        raise ConfError(p, None, "empty workload file")
    return out


def job_names_from_workloads(lines: list[WorkloadLine]) -> list[str]:
    """Job names as hybridsim uses them: the JSON file's stem (``./milc-36.json`` -> ``milc-36``) or the synthetic
    kind; a repeated name gets ``-<job id>`` appended."""
    base = [Path(w.app).stem if w.app.endswith(".json") else Path(w.app).name for w in lines]
    base = [re.sub(r"[^A-Za-z0-9_.\-]", "_", b) or f"job{i}" for i, b in enumerate(base)]
    return [b if base.count(b) == 1 else f"{b}-{i}" for i, b in enumerate(base)]


def find_workloads_conf(run_dir: str | os.PathLike) -> Path | None:
    d = Path(run_dir)
    cmd = read_command(d)
    name = cmd.options().get("workload_conf_file") if cmd is not None else None
    if name and (d / name).is_file():
        return d / name
    for name in ("workloads.conf", "workload.conf"):
        if (d / name).is_file():
            return d / name
    return None


def command_options(run_dir: str | os.PathLike) -> dict[str, str]:
    """``--key=value`` options of the run's command line (empty dict if there is none; see :func:`read_command`)."""
    cmd = read_command(run_dir)
    return {} if cmd is None else cmd.options()
