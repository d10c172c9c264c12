"""The config protocol: what every kernel family's config (``GemmConfig``, ``AttentionConfig``)
offers the CLI, the bench, the tuner, the precompiler and the export, and how its fields reach
the kernel it builds. Imports no MLIR.

A family's config is a frozen ``attrs`` class deriving from :class:`KernelConfig` and registered
under a name (:func:`register_family`). The shared code (``device/export.py``,
``device/precompile.py``, ``device/tune.py``'s record, the bench's JSON) handles a config
through this protocol only:

* ``can_implement(problem=None)``: why the config (or the config on ``problem``) cannot run,
  or None -- CUTLASS's ``can_implement``, with the reason as a sentence;
* ``for_problem(problem, **fixed)``: the family's model picks the fields left open, each with
  its reason (``reasons``, ``explain()``);
* ``to_dict()`` / ``from_dict(d)``: the constructor fields as JSON and back
  (``from_dict(c.to_dict()) == c``) -- an export manifest, a worker process, a tuning record;
* ``identity()``: ``{"family": name, "fields": to_dict()}``, the JSON-able dict that keys what
  is built from a config (the per-config caches of the front ends, the export's ``kind`` and
  ``config``); the on-disk kernel cache keys the *kernel's* ``config()`` beside it, which also
  covers user kernel subclasses;
* ``describe()``: the flat dict reports print (CLI ``--json``, bench records): fields and the
  values derived from them (resolved stages ...), plus ``"chosen"`` (the reasons) when the
  model picked them;
* ``kernel(...)``: the kernel object the config names.

**Fields -> kernel keywords.** A kernel class lists the config fields it takes as constructor
keywords (``CONFIG_FIELDS``). A config field says, in its ``attrs`` metadata
(:func:`kernel_args`), how it becomes keywords: :func:`always` (every kernel of the family takes
it), :func:`if_taken` (passed to a kernel that takes it; one without it has no use for it, e.g. a
raster order on a one-tile-per-CTA kernel) or :func:`if_set` (passed when it differs from its
neutral value; a kernel that does not take it refuses such a config by name,
``ConfigTypeError``). :func:`kernel_keywords` applies these rules, so a new knob is a config field
(with its metadata) and the kernel that reads it -- no edit in the builder.
"""
from __future__ import annotations

import importlib
import json

import attrs

from ..errors import ConfigError, ConfigTypeError, one_of

KERNEL_ARGS = "cutedsl.kernel_args"      #: attrs metadata key of a field's kernel keywords
_ALWAYS, _IF_TAKEN, _IF_SET = "always", "if_taken", "if_set"


@attrs.frozen
class KernelArg:
    """One kernel constructor keyword a config field gives: ``keyword``; ``value(cfg)`` (None:
    the field's value); ``when`` (``"always"``, ``"if_taken"`` or ``"if_set"``); ``default``:
    the neutral value of an ``if_set`` keyword (not passed when the value equals it);
    ``refusal(cfg)``: the message when a kernel without the keyword gets a set value (None: a
    generic one naming the field, the kernel class and the keyword)."""
    keyword: str
    value: object = None
    when: str = _ALWAYS
    default: object = None
    refusal: object = None


def always(keyword: str, value=None) -> KernelArg:
    """A keyword every kernel of the family takes (``TypeError`` from a class that does not)."""
    return KernelArg(keyword, value, _ALWAYS)


def if_taken(keyword: str, value=None) -> KernelArg:
    """A keyword passed only to a kernel class that takes it; others run without it."""
    return KernelArg(keyword, value, _IF_TAKEN)


def if_set(keyword: str, default, value=None, refusal=None) -> KernelArg:
    """A keyword passed when its value is not ``default``; a kernel class that does not take it
    refuses such a config (``ConfigTypeError`` naming the field, or ``ConfigError(refusal(cfg))``)."""
    return KernelArg(keyword, value, _IF_SET, default, refusal)


def kernel_args(*args: KernelArg) -> dict:
    """``attrs.field(metadata=kernel_args(...))``: the keywords a config field gives a kernel."""
    return {KERNEL_ARGS: tuple(args)}


def kernel_fields(cls) -> tuple:
    """The config fields a kernel class takes: its ``CONFIG_FIELDS`` (a subclass whose constructor
    takes other keywords sets its own), else its constructor's parameter names."""
    import inspect
    return getattr(cls, "CONFIG_FIELDS", None) or tuple(inspect.signature(cls).parameters)


def kernel_keywords(cfg, kernel_cls) -> dict:
    """The constructor keywords ``cfg``'s fields give ``kernel_cls`` (see the module docstring),
    in field order. Raises ``ConfigTypeError`` (or a field's own ``ConfigError``) for a field set
    to a value the class has no keyword for."""
    takes = kernel_fields(kernel_cls)
    kw = {}
    for f in attrs.fields(type(cfg)):
        for arg in f.metadata.get(KERNEL_ARGS, ()):
            v = arg.value(cfg) if arg.value is not None else getattr(cfg, f.name)
            if arg.when == _IF_TAKEN and arg.keyword not in takes:
                continue
            if arg.when == _IF_SET:
                if v == arg.default:
                    continue
                if arg.keyword not in takes:
                    if arg.refusal is not None:
                        raise ConfigError(arg.refusal(cfg))
                    raise ConfigTypeError(
                        f"{type(cfg).__name__}.{f.name}={getattr(cfg, f.name)!r} needs a kernel that takes "
                        f"{arg.keyword!r}; {kernel_cls.__name__} does not (it takes {', '.join(takes)}): "
                        f"leave {f.name} at its default or use a kernel class with {arg.keyword!r} in its "
                        f"CONFIG_FIELDS")
            kw[arg.keyword] = v
    return kw


def _jsonable(v):
    """``v`` as JSON gives it back (tuples become lists; dict keys strings)."""
    return json.loads(json.dumps(v, default=list))


class KernelConfig:
    """Base of every family's config (an ``attrs.frozen`` subclass; see the module docstring).

    Subclasses set :attr:`FAMILY` and implement :meth:`can_implement`, :meth:`for_problem`,
    :meth:`kernel`; they may refine :meth:`fields` (JSON spellings of values), :meth:`describe`
    and :meth:`explain`. ``reasons`` (an ``attrs`` field with ``init=False``) maps each field
    the model chose to why."""
    __slots__ = ()
    FAMILY = None            #: the registry name (``"gemm"``): an export's ``kind``
    FRONT_END = None         #: ``"module:Class"`` of the family's front end (``load`` builds it)

    # -- what the family implements -------------------------------------------------------
    def can_implement(self, problem=None) -> str | None:
        """Why this config cannot run (on ``problem``, when given), or None."""
        raise NotImplementedError

    @classmethod
    def for_problem(cls, problem, **fixed) -> "KernelConfig":
        """The config the family's model picks for ``problem``; ``fixed`` fields are kept; the
        result's ``reasons`` say why each chosen field has its value. ``ConfigError`` when
        nothing fits."""
        raise NotImplementedError

    def kernel(self, *args, **kw):
        """The kernel object this config builds."""
        raise NotImplementedError

    # -- shared ------------------------------------------------------------------------------
    def fields(self) -> dict:
        """The constructor fields and their values (``type(c)(**c.fields()) == c``)."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(type(self)) if f.init}

    def to_dict(self) -> dict:
        """:meth:`fields` as JSON values (lists for tuples): what an export manifest, a worker
        process or a tuning record carries; :meth:`from_dict` reads it back."""
        return _jsonable(self.fields())

    @classmethod
    def from_dict(cls, d: dict) -> "KernelConfig":
        """The config of ``d`` (:meth:`to_dict`'s output). ``ConfigTypeError`` for a ``d`` that
        is no dict or names a field the class does not have; ``ConfigError`` for a bad value."""
        if not isinstance(d, dict):
            raise ConfigTypeError(f"{cls.__name__}.from_dict: expected a dict of fields, got {type(d).__name__}")
        return cls(**d)

    def identity(self) -> dict:
        """``{"family": FAMILY, "fields": to_dict()}``: JSON-able, equal for equal configs in
        any process and version that reads the same fields."""
        return {"family": self.FAMILY, "fields": self.to_dict()}

    def describe(self) -> dict:
        """A flat JSON-able dict for reports: the fields, and ``"chosen"`` (field -> reason)
        when :meth:`for_problem` picked them."""
        out = self.to_dict()
        if getattr(self, "reasons", None) is not None:
            out["chosen"] = dict(self.reasons)
        return out

    def explain(self) -> str:
        """One line per field the model chose: why it has its value; or that it was set by hand."""
        if getattr(self, "reasons", None) is None:
            return f"set by hand (not chosen by {type(self).__name__}.for_problem)"
        return "\n".join(f"{f}: {r}" for f, r in self.reasons.items())

    @classmethod
    def front_end(cls):
        """The family's front end class (``Gemm`` for GEMM configs): what ``cutedsl.load`` builds."""
        mod, _, name = cls.FRONT_END.partition(":")
        return getattr(importlib.import_module(mod), name)


# -- the registry of families -----------------------------------------------------------------
#: the families this library ships, by name: ``"module:Class"`` (imported on first use, so
#: ``import cutedsl`` stays light); ``register_family`` adds others
_BUILTIN = {"gemm": "cutedsl.device.config:GemmConfig", "attention": "cutedsl.device.attention_config:AttentionConfig"}
_FAMILIES: dict = {}


def register_family(cls):
    """Class decorator: make ``cls`` (a :class:`KernelConfig` subclass with a ``FAMILY`` name)
    known to :func:`config_family` -- the export, precompile and tuning records then read it.
    ``ConfigError`` for a class without a name or a name already taken by another class."""
    name = getattr(cls, "FAMILY", None)
    if not (isinstance(cls, type) and issubclass(cls, KernelConfig)) or not isinstance(name, str) or not name:
        raise ConfigError(f"register_family: {cls!r} must be a KernelConfig subclass with a FAMILY name")
    have = _FAMILIES.get(name)
    if have is not None and have is not cls:
        raise ConfigError(f"register_family: family {name!r} is already {have.__module__}.{have.__qualname__}")
    _FAMILIES[name] = cls
    return cls


def family_names() -> tuple:
    """The registered family names (built-in ones first)."""
    return tuple(dict.fromkeys((*_BUILTIN, *_FAMILIES)))


def config_family(name) -> type:
    """The config class of family ``name`` (``"gemm"`` -> ``GemmConfig``); ``ConfigError``
    naming the known families for another name."""
    if name not in _FAMILIES and isinstance(name, str) and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name].partition(":")[0])     # registers itself
    if name not in _FAMILIES:
        raise ConfigError(f"config family must be {one_of(family_names())}, got {name!r}")
    return _FAMILIES[name]


def config_from_identity(identity: dict) -> KernelConfig:
    """The config an :meth:`KernelConfig.identity` dict describes (its family's ``from_dict``)."""
    if not isinstance(identity, dict) or "fields" not in identity:
        raise ConfigTypeError(f"a config identity is a dict with 'family' and 'fields', got {identity!r}")
    return config_family(identity.get("family")).from_dict(identity["fields"])


__all__ = ["KernelConfig", "KernelArg", "always", "if_taken", "if_set", "kernel_args", "kernel_fields",
           "kernel_keywords", "register_family", "config_family", "family_names", "config_from_identity"]
