"""Identity of the code that generates a kernel: what the compiled-kernel cache key covers.

A kernel's PTX is a function of (1) its name and config, (2) the library's code-generating
sources, (3) any user code that takes part in building it — a subclass of a kernel, mainloop,
epilogue or tile scheduler, their base classes in other modules, helper functions they call —
and (4) the toolchain versions (hashed separately by the cache). :func:`kernel_key` hashes
(1)-(3) from source text only, so the same key is computed on a machine without MLIR that runs
kernels from a copied cache.

User code is found from objects: for every class in the MRO of each object's type (or of each
class passed) outside the ``cutedsl`` package, ``builtins`` and the standard library, the
source file of its module is hashed, and so, transitively, are the *user* modules it imports
(anywhere in the file, function-level imports included) or holds in its globals. A user module
is one outside ``cutedsl``, the standard library and site-packages. Classes without a source
file (``python -c``, ``exec``) contribute a hash of their methods' bytecode instead.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import numbers
import os
import site
import sys
import sysconfig
import types
from pathlib import Path

_PKG = Path(__file__).resolve().parent.parent
_CODEGEN = ("ir", "compiler", "atom", "collective", "kernel")
_CODEGEN_FILES = ("dtypes.py", "arch.py", "problem.py")     #: root modules the kernels are generated from
_FILE_CACHE: dict = {}   # (content digest, package) -> names of the modules the file imports


@functools.lru_cache(maxsize=None)
def library_hash() -> str:
    """SHA-256 (16 hex digits) over the library sources that determine generated code:
    ``dtypes.py``, ``arch.py`` (target, budgets), ``problem.py`` and the ``ir``, ``compiler``,
    ``atom``, ``collective``, ``kernel`` packages."""
    h = hashlib.sha256()
    files = [_PKG / f for f in _CODEGEN_FILES] + sorted(p for d in _CODEGEN for p in (_PKG / d).rglob("*.py"))
    for p in files:
        h.update(str(p.relative_to(_PKG)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def qualname(cls) -> str:
    """``module.QualifiedName`` of a class (or function)."""
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.lru_cache(maxsize=None)
def _roots() -> tuple:
    """(standard-library roots, site-packages roots), resolved."""
    paths = sysconfig.get_paths()
    std = {paths.get("stdlib"), paths.get("platstdlib")}
    sites = {paths.get("purelib"), paths.get("platlib")}
    try:
        sites.update(site.getsitepackages())
        sites.add(site.getusersitepackages())
    except AttributeError:      # pragma: no cover - virtualenv's old site.py
        pass
    res = lambda s: tuple(str(Path(p).resolve()) + os.sep for p in s if p)   # noqa: E731
    return res(std), res(sites)


def _module_file(mod) -> Path | None:
    f = getattr(mod, "__file__", None)
    if not f or not f.endswith((".py", ".pyc")):
        return None             # built-in, frozen, namespace package or extension module
    p = Path(f).resolve()
    return p if p.is_file() else None


def _kind(path: Path) -> str:
    """``library``, ``stdlib``, ``site`` or ``user``."""
    s = str(path)
    if path.is_relative_to(_PKG):
        return "library"
    std, sites = _roots()
    if s.startswith(sites):         # checked first: site-packages usually lies under the stdlib root
        return "site"
    if s.startswith(std):
        return "stdlib"
    return "user"


def _file_info(path: Path, package: str | None) -> tuple:
    """(digest, absolute names of the modules the file imports). The file is read every time
    (an edit within the file system's timestamp resolution must count); the parse is cached
    per content."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()[:16]
    hit = _FILE_CACHE.get((digest, package))
    if hit is not None:
        return digest, hit
    names = []
    if path.suffix == ".py":
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                try:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                        if node.level else node.module
                except (ImportError, ValueError):
                    continue
                names.append(base)
                names += [f"{base}.{a.name}" for a in node.names]   # ``from pkg import submodule``
    _FILE_CACHE[(digest, package)] = tuple(names)
    return digest, tuple(names)


def _spec_file(name: str) -> Path | None:
    """Source file of a module not imported yet (a function-level import), without importing it."""
    parent = name.rpartition(".")[0]
    if parent and parent not in sys.modules:
        return None             # finding it would import its parent package
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin).resolve()


def _visit(name: str, out: dict, direct: bool) -> None:
    """Hash module ``name`` into ``out`` (name -> digest) and the user modules it uses."""
    if name in out or name == "builtins":
        return
    mod = sys.modules.get(name)
    if not isinstance(mod, types.ModuleType):
        mod = None              # not imported (yet), or a stand-in object in sys.modules
    path = _module_file(mod) if mod is not None else _spec_file(name)
    if path is None:
        return
    kind = _kind(path)
    if kind in ("library", "stdlib") or (kind == "site" and not direct):
        return
    package = getattr(mod, "__package__", None) if mod is not None else name.rpartition(".")[0]
    if mod is not None and getattr(mod, "__path__", None) is not None:
        package = name
    digest, imported = _file_info(path, package)
    out[name] = digest
    used = set(imported)
    for v in (vars(mod).values() if mod is not None else ()):
        if isinstance(v, types.ModuleType):
            used.add(v.__name__)
        elif isinstance(v, (type, types.FunctionType)):
            used.add(getattr(v, "__module__", None) or "")
    for n in sorted(used - {"", name}):
        if n in sys.modules or "." not in n or n.rpartition(".")[0] in sys.modules:
            _visit(n, out, direct=False)


def _code_digest(h, obj, seen: set) -> None:
    """Bytecode, names and constants of ``obj`` (function, method, property, code object),
    and of the file-less functions its code calls through its globals."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _code_digest(h, f, seen)
        return
    glb = getattr(obj, "__globals__", None)
    co = getattr(obj, "__code__", obj)
    if not isinstance(co, types.CodeType):
        if isinstance(obj, (int, float, str, bytes, bool, tuple, type(None))):
            h.update(repr(obj).encode())
        return
    if id(co) in seen:
        return
    seen.add(id(co))
    h.update(co.co_code)
    h.update(repr((co.co_names, co.co_varnames)).encode())
    for c in co.co_consts:
        _code_digest(h, c, seen) if isinstance(c, types.CodeType) else h.update(repr(c).encode())
    for name in co.co_names if glb is not None else ():
        f = glb.get(name)
        if isinstance(f, types.FunctionType) and not getattr(sys.modules.get(f.__module__), "__file__", None):
            _code_digest(h, f, seen)      # a helper defined beside the class (notebook cell, exec)
        elif isinstance(f, (types.ModuleType, types.FunctionType, type)):
            mods: dict = {}               # a user module (or its function, class) the code uses
            _visit(f.__name__ if isinstance(f, types.ModuleType) else f.__module__, mods, direct=False)
            h.update(json.dumps(mods, sort_keys=True).encode())
        elif isinstance(f, (numbers.Number, str, bytes, tuple, type(None))):
            h.update(f"{name}={f!r}".encode())    # a constant beside the class (SCALE = 2.0)


def _class_code(cls) -> str:
    """Digest of a class body without a source file: methods' bytecode and constants."""
    h, seen = hashlib.sha256(), set()
    for k, v in sorted(vars(cls).items()):
        h.update(k.encode())
        _code_digest(h, v, seen)
    return h.hexdigest()[:16]


def _plain_attrs(cls) -> str:
    """Digest of a class's own data attributes with plain values (numbers, strings, tuples of
    them), as they are now; "" when it has none."""
    def plain(v):
        return isinstance(v, (numbers.Number, str, bytes, type(None))) or \
            (isinstance(v, tuple) and all(map(plain, v)))
    items = sorted((k, repr(v)) for k, v in vars(cls).items() if not k.startswith("__") and plain(v))
    return hashlib.sha256(repr(items).encode()).hexdigest()[:16] if items else ""


def code_identity(*objects) -> dict:
    """The user code behind ``objects`` (instances or classes), JSON-able.

    ``{"classes": [qualified names of the MRO classes outside builtins, in order],
    "modules": {user module name: source digest}, "code": {class without a source file:
    bytecode digest, "<class>:attrs": digest of a user class's plain data attributes as they
    are now}}``. Functions, classes and modules held in an instance's attributes
    (e.g. a helper stored on an epilogue) count as used too."""
    classes, modules, code = [], {}, {}
    for obj in objects:
        cls = obj if isinstance(obj, type) else type(obj)
        extra = []
        if not isinstance(obj, type):
            extra = [v for v in getattr(obj, "__dict__", {}).values()
                     if isinstance(v, (type, types.FunctionType, types.ModuleType))]
        for c in cls.__mro__:
            if c.__module__ == "builtins":
                continue
            classes.append(qualname(c))
            if not c.__module__.startswith("cutedsl."):
                values = _plain_attrs(c)
                if values:                    # set at run time (``MyKernel.splits = 4``): not in the source
                    code[qualname(c) + ":attrs"] = values
            mod = sys.modules.get(c.__module__)
            if mod is not None and getattr(mod, "__file__", None):
                _visit(c.__module__, modules, direct=True)   # (extension modules are skipped)
            else:
                code[qualname(c)] = _class_code(c)           # no source file: python -c, exec
        for v in extra:
            _visit(v.__name__ if isinstance(v, types.ModuleType) else v.__module__, modules, direct=True)
    return {"classes": list(dict.fromkeys(classes)), "modules": dict(sorted(modules.items())),
            "code": dict(sorted(code.items()))}


def _cell_text(v, seen: set) -> str:
    """Deterministic text of a value a function closes over or defaults to."""
    if isinstance(v, types.FunctionType):
        return "fn:" + function_identity(v, seen)["code"]
    if isinstance(v, (numbers.Number, str, bytes, type(None))):
        return repr(v)
    if isinstance(v, (tuple, list, frozenset)):
        return type(v).__name__ + "(" + ",".join(_cell_text(x, seen) for x in v) + ")"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k!r}:{_cell_text(x, seen)}" for k, x in sorted(v.items(), key=repr)) + "}"
    if hasattr(v, "tobytes") and hasattr(v, "dtype") and hasattr(v, "shape"):     # a numpy array
        return f"array({v.dtype},{v.shape},{hashlib.sha256(v.tobytes()).hexdigest()[:16]})"
    if isinstance(v, type):
        return "class:" + json.dumps(code_identity(v), sort_keys=True)
    return "obj:" + json.dumps(code_identity(v), sort_keys=True)


def function_identity(fn, _seen: set | None = None) -> dict:
    """The code behind a plain function (an attention hook, a helper given to a kernel), JSON-able:
    ``{"function": qualified name, "code": digest of its bytecode, names and constants (nested
    functions and lambdas included), the constants and file-less helpers it reads from its
    globals, its default values and the values it closes over (numbers, strings, tuples, numpy
    arrays, nested functions; other objects by their class's code), "modules": {user module:
    source digest}}``. So editing the function's body or calling its factory with another
    constant (``make_window(64)`` vs ``make_window(128)``) gives another identity."""
    seen = set() if _seen is None else _seen
    h = hashlib.sha256()
    _code_digest(h, fn, seen)
    for d in (fn.__defaults__ or ()):
        h.update(_cell_text(d, seen).encode())
    for k, d in sorted((fn.__kwdefaults__ or {}).items()):
        h.update(f"{k}={_cell_text(d, seen)}".encode())
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:          # an empty cell (a name assigned after the function was made)
            v = "<empty>"
        if v is fn:
            continue                # a recursive function refers to itself
        h.update(f"{name}={_cell_text(v, seen)}".encode())
    modules: dict = {}
    mod = sys.modules.get(fn.__module__)
    if mod is not None and getattr(mod, "__file__", None):
        _visit(fn.__module__, modules, direct=True)
    return {"function": qualname(fn), "code": h.hexdigest()[:16], "modules": dict(sorted(modules.items()))}


def kernel_key(name: str, config: dict, objects=()) -> tuple:
    """``(key, identity)``: the cache key (24 hex digits) of kernel ``name`` with ``config``
    built by ``objects`` (the kernel and its collectives), and the JSON-able identity hashed."""
    ident = {"kernel": name, "config": config, "library": library_hash(), "user_code": code_identity(*objects)}
    blob = json.dumps(ident, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24], ident
