"""Compiled programs that a second identical run does not trace again.

JAX's persistent compilation cache skips XLA's compile, but every run still traces and lowers its Python
into StableHLO first, which for an anakin chunk costs more than the cached compile it feeds. Here a program
is traced once, exported (`jax.export`) and kept beside the compilation cache; a run whose program has the
same key loads the export instead of tracing. Every run compiles from the export, so its XLA program is the
same text each time and the persistent cache hits from the second run on.

The key must change whenever the traced program could: it digests the program's name, the caller's context
(its composed config), its arguments' structure, shapes, dtypes and shardings, the JAX settings that change a
trace, every installed distribution's version and the source of every loaded module that is not an installed
distribution (this repository, a user's own agent).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import pickle
import sys
import sysconfig
from typing import Any, Callable

import jax
from jax import export

log = logging.getLogger(__name__)

FORMAT = 1  # Bumped when what is stored changes.
SUBDIRECTORY = "exported"
_TRACE_SETTINGS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
)


def compile_program(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    *,
    name: str,
    context: str,
    directory: str | None,
    sharding: Any = None,
) -> Callable[..., Any]:
    """`function` compiled for `args` (pytrees of arrays), as `jax.jit(function).lower(*args).compile()` would,
    with every argument and result placed by `sharding` (None: default placement). `directory` (the persistent
    compilation cache's; None: no cache) keeps the traced program under a key of `name`, `context` and the
    rest named in this module's docstring."""
    leaves, in_tree = jax.tree_util.tree_flatten(args)
    placed = {} if sharding is None else {"in_shardings": sharding, "out_shardings": sharding}
    if directory is None or not can_serialize():
        return jax.jit(function, **placed).lower(*args).compile()
    platform = _platform(leaves, sharding)
    key = program_key(name, f"{platform}:{context}", leaves, in_tree, sharding)
    path = os.path.join(directory, SUBDIRECTORY, f"{name}-{key}")
    stored = _load(path)
    if stored is None:
        stored = _export(function, in_tree, leaves, placed, platform)
        _store(path, stored)
    exported, out_tree = stored
    return LoadedProgram(jax.jit(exported.call, **placed).lower(*leaves).compile(), out_tree)


@functools.cache
def can_serialize() -> bool:
    """Whether `jax.export` can write a program here (it needs flatbuffers); warns once where it cannot."""
    try:
        import flatbuffers  # noqa: F401
    except ImportError:
        log.warning("programs are traced anew every run: jax.export needs flatbuffers (pip install flatbuffers)")
        return False
    return True


class LoadedProgram:
    """An exported program compiled: called with the pytrees the traced function took, it returns the
    pytree that function returned; `memory_analysis()` is the compiled program's, as jax's own has it."""

    def __init__(self, compiled: Any, out_tree: Any):
        self.compiled = compiled
        self.out_tree = out_tree

    def __call__(self, *args: Any) -> Any:
        return jax.tree_util.tree_unflatten(self.out_tree, self.compiled(*jax.tree_util.tree_leaves(args)))

    def memory_analysis(self) -> Any:
        return self.compiled.memory_analysis()


def _platform(leaves: list[Any], sharding: Any) -> str:
    """Where the program runs: its sharding's devices', else its first array argument's, else JAX's default."""
    if sharding is not None:
        return next(iter(sharding.device_set)).platform
    for leaf in leaves:
        if isinstance(leaf, jax.Array):
            return next(iter(leaf.devices())).platform
    return jax.default_backend()


def _export(
    function: Callable[..., Any], in_tree: Any, leaves: list[Any], placed: dict[str, Any], platform: str
) -> tuple[Any, Any]:
    """(the exported program over flat leaves, the results' tree structure), traced once."""
    trees: list[Any] = []

    def flat(*leaves: Any) -> list[Any]:
        results, out_tree = jax.tree_util.tree_flatten(function(*jax.tree_util.tree_unflatten(in_tree, leaves)))
        trees.append(out_tree)
        return results

    exported = export.export(jax.jit(flat, **placed), platforms=[platform])(*leaves)
    return exported, trees[-1]


def _load(path: str) -> tuple[Any, Any] | None:
    """The export at `path`, or None where there is none or it cannot be read (it is then made again)."""
    try:
        with open(path, "rb") as file:
            fmt, serialized, out_tree = pickle.load(file)
        if fmt != FORMAT:
            return None
        return export.deserialize(serialized), out_tree
    except FileNotFoundError:
        return None
    except Exception as error:  # A damaged or foreign file costs a trace, never the run.
        log.debug("%s: not a usable exported program (%s); tracing again", path, error)
        return None


def _store(path: str, stored: tuple[Any, Any]) -> None:
    """Written under a temporary name, then renamed: a reader never sees half a file."""
    exported, out_tree = stored
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "wb") as file:
        pickle.dump((FORMAT, bytes(exported.serialize()), out_tree), file)
    os.replace(temporary, path)


def program_key(name: str, context: str, leaves: list[Any], in_tree: Any, sharding: Any) -> str:
    """A digest of everything that can change the program traced for these arguments."""
    digest = hashlib.sha256()
    for part in (FORMAT, name, context, in_tree, repr(sharding), os.environ.get("XLA_FLAGS", "")):
        digest.update(repr(part).encode())
    for leaf in leaves:
        digest.update(f"{jax.numpy.shape(leaf)}{jax.numpy.result_type(leaf)}".encode())
    digest.update(repr([jax.config.values.get(setting) for setting in _TRACE_SETTINGS]).encode())
    digest.update(_environment_digest().encode())
    return digest.hexdigest()[:32]


def _environment_digest() -> str:
    """Installed distributions' versions, and the source of every loaded module outside them."""
    digest = hashlib.sha256(_installed_digest().encode())
    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)  # Foreign objects: modules without a file have none.
        if source and source.endswith(".py"):
            digest.update(_source_digest(source))
    return digest.hexdigest()


@functools.cache
def _installed_digest() -> str:
    """Every distribution on the path by its metadata directory's name (`<name>-<version>.dist-info`): read
    from the directory listings, which costs a run nothing, where parsing every METADATA file cost seconds."""
    return repr(sorted({entry for directory in _site_directories() for entry in _metadata_entries(directory)}))


@functools.cache
def _site_directories() -> tuple[str, ...]:
    """The interpreter's own library directories and every path entry that holds installed distributions
    (a `pip install --target` directory on PYTHONPATH is one; a project with an `.egg-info` is not)."""
    own = {os.path.realpath(sysconfig.get_paths()[key]) for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    found = {os.path.realpath(entry) for entry in sys.path if entry and _metadata_entries(entry)}
    return tuple(sorted(own | found))


def _metadata_entries(directory: str) -> list[str]:
    try:
        return [entry for entry in os.listdir(directory) if entry.endswith(".dist-info")]
    except OSError:
        return []


@functools.cache
def _source_digest(source: str) -> bytes:
    """A loaded module's file and content digested, or nothing for one an installed distribution or the
    standard library holds (their versions are digested instead); each file is read once a process."""
    path = os.path.realpath(source)
    if path.startswith(tuple(directory + os.sep for directory in _site_directories())):
        return b""
    try:
        with open(path, "rb") as file:
            return path.encode() + hashlib.sha256(file.read()).digest()
    except OSError:  # A module whose file has gone since it was loaded.
        return path.encode()
