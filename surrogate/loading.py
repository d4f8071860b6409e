"""One resolver for every caller that takes a surrogate "spec" (the runner, the CODES director, the gRPC surrogate
service, ``hybridsim surrogate evaluate``): :func:`load`.

A spec is one of

* a registered model name, optionally with constructor options: ``ridge``, ``ridge:k=8``, ``lstm:epochs=5,hidden=32``;
* a checkpoint folder (``hybridsim surrogate train`` writes a per-job folder with ``train.json``;
  :meth:`~surrogate.base.Surrogate.save` a single-model folder with ``config.json``);
* ``NAME=FOLDER``: a checkpoint folder that must hold model ``NAME``.

The one "is it a path" rule (:func:`is_checkpoint_spec`): ``NAME:options`` (a plain name before the first ``:``) is
a model name whatever its options hold (``pretrained:weights=/path/model.safetensors``, ``oracle:run=results/x/pure``); otherwise a spec is a folder
if it has a path separator, starts with ``.`` or ``~``, or names an existing directory (relative to ``base_dir``);
anything else is a model name. A checkpoint folder is loaded in full (config, constructor, weights) by
:func:`load`, which ``hybridsim validate`` calls too; weights are read with safetensors only, never pickle.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .base import Surrogate, SurrogateError
from .registry import check_config, create

#: ``format`` of a per-job checkpoint folder's ``train.json``
CKPT_FORMAT = "hybridsim-surrogate-checkpoints"


#: largest ``config.json`` / ``train.json`` read (a checkpoint's are a few hundred bytes)
MAX_JSON_BYTES = 1 << 20


def _read_json(path: Path, what: str):
    """The JSON in ``path``; :class:`SurrogateError` naming it for anything but a small, readable, UTF-8 JSON file
    (too big, not a regular file, not UTF-8, malformed, nested too deep)."""
    try:
        if not path.is_file():
            raise SurrogateError(f"{path}: corrupt {what}: not a regular file")
        if path.stat().st_size > MAX_JSON_BYTES:
            raise SurrogateError(f"{path}: corrupt {what}: {path.stat().st_size} bytes, more than {MAX_JSON_BYTES}")
        return json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SurrogateError(f"{path}: corrupt {what}: not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SurrogateError(f"{path}: corrupt {what}: {exc}") from None
    except RecursionError:
        raise SurrogateError(f"{path}: corrupt {what}: nested too deep") from None
    except OSError as exc:
        raise SurrogateError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def load_surrogate(path: str | Path) -> Surrogate:
    """Load a single-model checkpoint folder written by :meth:`Surrogate.save`: ``config.json`` (model name and
    constructor options) and optional ``model.safetensors`` (read with safetensors only: no pickle, no code).
    Anything unusable is a :class:`SurrogateError` naming the file."""
    from .base import check_kwargs
    from .registry import model_class

    path = Path(path)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise SurrogateError(f"{path}: not a surrogate checkpoint (no config.json)")
    cfg = _read_json(cfg_path, "checkpoint config")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), str) \
            or not isinstance(cfg.get("config", {}), dict):
        raise SurrogateError(f"{cfg_path}: corrupt checkpoint config: expected {{\"model\": NAME, \"config\": "
                             f"{{...}}}}")
    name, config = cfg["model"], cfg.get("config", {})
    try:
        cls = model_class(name)
        check_kwargs(cls, config)
        model = cls(**config)
    except SurrogateError as exc:
        raise SurrogateError(f"{cfg_path}: {exc}") from None
    except Exception as exc:  # a constructor's TypeError / ValueError on a bad option value
        raise SurrogateError(f"{cfg_path}: bad options for model {name!r}: {type(exc).__name__}: {exc}") from None
    st = path / "model.safetensors"
    if st.exists() or st.is_symlink():
        from safetensors.torch import load_file

        if not st.is_file():
            raise SurrogateError(f"{st}: corrupt weights: not a regular file")
        try:
            state = load_file(str(st))
        except Exception as exc:  # safetensors raises its own error types
            raise SurrogateError(f"{st}: corrupt weights: {exc}") from None
        try:
            model._load_state(state)
        except SurrogateError as exc:
            raise SurrogateError(f"{st}: {exc}") from None
        except Exception as exc:  # a state dict that does not fit the model
            raise SurrogateError(f"{st}: weights do not fit model {name!r}: {type(exc).__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    return model


def load_checkpoints(path: str | Path, dataset=None, expect_model: str | None = None) -> tuple[str, dict]:
    """Load a checkpoint folder: either a per-job folder with ``train.json`` or a single model checkpoint
    (``config.json``, used for every job). Returns ``(model name, {job or "*": Surrogate})``. Checks the
    topology against ``dataset`` and the model name against ``expect_model``."""
    from .graphs import shape_dict

    path = Path(path)
    if not path.exists():
        raise SurrogateError(f"{path}: checkpoint not found")
    tj = path / "train.json"
    if tj.is_file():
        meta = _read_json(tj, "checkpoint index")
        try:
            name, jobs = meta["model"], dict(meta["jobs"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SurrogateError(f"{tj}: corrupt checkpoint index: {type(exc).__name__}: {exc}") from None
        if meta.get("format") != CKPT_FORMAT:
            raise SurrogateError(f"{tj}: not a {CKPT_FORMAT} file")
        inside = path.resolve()
        for job, sub in jobs.items():
            if not isinstance(sub, str) or not (path / sub).resolve().is_relative_to(inside) \
                    or (path / sub).resolve() == inside:
                raise SurrogateError(f"{tj}: job {job!r}: {sub!r} is not a sub-folder of the checkpoint")
        if expect_model and name != expect_model:
            raise SurrogateError(f"{path}: checkpoint is of model {name!r}, not {expect_model!r}")
        if dataset is not None and meta.get("topology") != shape_dict(dataset.shape):
            raise SurrogateError(f"{path}: checkpoint was trained on topology {meta.get('topology')}, the dataset is "
                                 f"{shape_dict(dataset.shape)}")
        models = {}
        for job, sub in jobs.items():
            m = load_surrogate(path / sub)
            if m.name != name:
                raise SurrogateError(f"{path / sub}: holds model {m.name!r}, index says {name!r}")
            models[job] = m
        return name, models
    if (path / "config.json").is_file():
        m = load_surrogate(path)
        if expect_model and m.name != expect_model:
            raise SurrogateError(f"{path}: checkpoint is of model {m.name!r}, not {expect_model!r}")
        topo = m.config().get("topology")
        if dataset is not None and topo is not None and topo != shape_dict(dataset.shape):
            raise SurrogateError(f"{path}: checkpoint was trained on topology {topo}, the dataset is "
                                 f"{shape_dict(dataset.shape)}")
        return m.name, {"*": m}
    raise SurrogateError(f"{path}: not a surrogate checkpoint (no train.json or config.json)")


def _option_value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    return text


def parse_options(items, what: str = "option") -> dict:
    """``["k=4", "epochs=5"]`` -> ``{"k": 4, "epochs": 5}`` (ints, floats, true/false, else strings)."""
    out = {}
    for item in items or ():
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise SurrogateError(f"{what} expects KEY=VALUE, got {item!r}")
        out[key.strip()] = _option_value(val.strip())
    return out


def _pathlike(text: str) -> bool:
    return "/" in text or os.sep in text or text.startswith((".", "~"))


def is_checkpoint_spec(spec: str, base_dir: str | Path | None = None) -> bool:
    """The one rule for "is this spec a checkpoint folder" (see the module docstring)."""
    name, colon, _ = spec.partition(":")
    if colon and name.strip() and not _pathlike(name):
        return False  # NAME:options, whatever the options hold (pretrained:weights=/some/file)
    if _pathlike(spec):
        return True
    p = Path(spec)
    return (Path(base_dir) / p if base_dir is not None else p).is_dir()


def checkpoint_folder(spec: str, base_dir: str | Path | None = None) -> tuple[str | None, Path] | None:
    """``(model name the folder must hold or None, folder)`` for a checkpoint spec (``FOLDER`` or ``NAME=FOLDER``,
    relative to ``base_dir``), None for a model name (see the module docstring)."""
    spec = str(spec).strip()
    head, eq, tail = spec.partition("=")
    if eq and ":" not in head and not _pathlike(head):
        expect, folder = head.strip(), tail.strip()
    elif is_checkpoint_spec(spec, base_dir):
        expect, folder = None, spec
    else:
        return None
    p = Path(folder).expanduser()
    if base_dir is not None and not p.is_absolute():
        p = Path(base_dir) / p
    return expect, p


@dataclass
class ModelSource:
    """What a spec names: a registered model built fresh per use, or the trained models of a checkpoint."""

    spec: str
    name: str                                   #: the model's registry name
    config: dict = field(default_factory=dict)  #: constructor options of a named model
    path: Path | None = None                    #: the checkpoint folder, None for a named model
    trained: dict[str, Surrogate] = field(default_factory=dict)  #: job name (or "*" for every job) -> model

    @property
    def is_checkpoint(self) -> bool:
        return self.path is not None

    def new(self) -> Surrogate:
        """A fresh instance of a named model; for a checkpoint, a copy of its single model."""
        if self.path is None:
            return _construct(self.name, self.config)
        if set(self.trained) != {"*"}:
            raise SurrogateError(f"{self.path}: checkpoint holds one model per job ({', '.join(sorted(self.trained))}); "
                                 "give one job's folder")
        return copy.deepcopy(self.trained["*"])

    def for_job(self, job: str) -> Surrogate:
        """The model for job ``job``: a fresh instance of a named model, the job's trained model, or a copy of a
        single-model checkpoint."""
        if self.path is None:
            return _construct(self.name, self.config)
        if job in self.trained:
            return self.trained[job]
        if "*" in self.trained:
            return copy.deepcopy(self.trained["*"])
        raise SurrogateError(f"surrogate.model {self.spec}: no trained model for job {job!r} "
                             f"(checkpoint has {', '.join(sorted(self.trained))})")


def _construct(name: str, config: dict) -> Surrogate:
    try:
        return create(name, **config)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SurrogateError):
            raise
        opts = " ".join(f"{k}={v}" for k, v in config.items())
        raise SurrogateError(f"bad options for model {name!r} ({opts}): {exc}") from None


def split_spec(spec: str) -> tuple[str, dict]:
    """``"ridge:k=8,lookback=4"`` -> ``("ridge", {"k": 8, "lookback": 4})``."""
    name, _, opts = spec.partition(":")
    return name.strip(), parse_options([o for o in opts.split(",") if o.strip()], f"model {spec!r}: option")


def load(spec: str, config: dict | None = None, *, base_dir: str | Path | None = None, dataset=None,
         check: bool = False) -> ModelSource:
    """Resolve ``spec`` (see the module docstring). ``config``: constructor options of a named model (merged over the
    spec's own ``:k=v``; refused with a checkpoint). ``base_dir``: where relative folders are (default: the working
    directory). ``dataset``: a checkpoint's topology is checked against it. ``check``: a named model's options are
    checked (:meth:`Surrogate.check_config`) here. Raises :class:`SurrogateError`."""
    spec = str(spec).strip()
    config = dict(config or {})
    ckpt = checkpoint_folder(spec, base_dir)
    if ckpt is None:
        name, opts = split_spec(spec)
        opts.update(config)
        if check:
            check_config(name, opts)
        else:
            from .registry import model_class

            model_class(name)  # an unknown name fails here, before any run
        return ModelSource(spec, name, opts)
    if config:
        raise SurrogateError(f"{spec}: model options {config} cannot be applied to a checkpoint (its config.json "
                             "holds them)")
    expect, p = ckpt
    name, trained = load_checkpoints(p, dataset, expect_model=expect)
    return ModelSource(spec, name, {}, p, trained)
