"""TensorFlow for reverb without importing all of TensorFlow (about 5 s per process).

reverb and our replay code use a handful of names from modules under `tensorflow.python`.
`install()` (run by `import rl`) puts a stand-in `tensorflow` module with TensorFlow's
package path into `sys.modules`: it answers the names in `_LIGHT` from those modules, and
any other attribute runs TensorFlow's own `__init__` into the same module first, so code
that needs all of TensorFlow gets it, once, when it asks. tf.data's two packages wait the
same way. `RL_LAZY_TENSORFLOW=0` turns it off. Pinned to TensorFlow 2.15's layout
(tests/test_lazy_tensorflow.py checks every name).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from typing import Any, ClassVar

_DTYPES = "tensorflow.python.framework.dtypes"
_DATASETS = "tensorflow.python.data.ops.dataset_ops"

# name: (module, attribute) of what the stand-in answers without the full import.
_LIGHT: dict[str, tuple[str, str]] = {
    "__version__": ("tensorflow.python.framework.versions", "__version__"),
    "Tensor": ("tensorflow.python.framework.tensor", "Tensor"),
    "TensorSpec": ("tensorflow.python.framework.tensor_spec", "TensorSpec"),
    "TensorShape": ("tensorflow.python.framework.tensor_shape", "TensorShape"),
    "TypeSpec": ("tensorflow.python.framework.type_spec", "TypeSpec"),
    "as_dtype": (_DTYPES, "as_dtype"),
    "load_op_library": ("tensorflow.python.framework.load_library", "load_op_library"),
    **{name: (_DTYPES, name) for name in ("float32", "float64", "double", "int32", "int64", "uint64", "string")},
}
# Namespaces: attribute -> {name: (module, attribute)}.
_NAMESPACES: dict[str, dict[str, tuple[str, str]]] = {
    "version": {"VERSION": ("tensorflow.python.framework.versions", "__version__")},
    "data": {"Dataset": (_DATASETS, "DatasetV2"), "AUTOTUNE": (_DATASETS, "AUTOTUNE")},
    "config": {"set_visible_devices": ("tensorflow.python.framework.config", "set_visible_devices")},
}
# tf.compat.v1: the same names, `to_float` (reverb's datasets test for it to tell a TF1
# runtime), its own Dataset class, and the resource loader reverb's op library asks for.
_V1_LIGHT: dict[str, tuple[str, str]] = {**_LIGHT, "to_float": ("tensorflow.python.ops.math_ops", "to_float")}
_V1_NAMESPACES: dict[str, dict[str, tuple[str, str]]] = {
    "data": {"Dataset": (_DATASETS, "DatasetV1"), "AUTOTUNE": (_DATASETS, "AUTOTUNE")},
    "resource_loader": {
        "get_path_to_datafile": ("tensorflow.python.platform.resource_loader", "get_path_to_datafile"),
    },
}


def _resolve(source: tuple[str, str]) -> Any:
    _behave_as_tensorflow_2()
    module, attribute = source
    return getattr(importlib.import_module(module), attribute)


def _behave_as_tensorflow_2() -> None:
    """What TensorFlow's `__init__` switches on before anything runs (`v2_compat`'s
    `enable_v2_behavior`): eager execution, resource variables, v2 shapes, tensor
    equality, control flow v2. Once, on the first name the stand-in answers. Its other
    half points tf.data's names at their V2 classes, which TF2_BEHAVIOR (set by
    `install`) already does as those modules load; calling it would import
    `tensorflow.python.data.experimental`, seconds of start-up that replay never uses."""
    if not _state["behaviour"]:
        _state["behaviour"] = True
        from tensorflow.python import tf2
        from tensorflow.python.framework import ops, tensor, tensor_shape
        from tensorflow.python.ops import control_flow_v2_toggles, variable_scope

        tf2.enable()
        ops.enable_eager_execution()
        tensor_shape.enable_v2_tensorshape()
        variable_scope.enable_resource_variables()
        tensor.enable_tensor_equality()
        control_flow_v2_toggles.enable_control_flow_v2()


class _Namespace:
    """A `tf.data`-like namespace whose names load on first use."""

    def __init__(self, names: dict[str, tuple[str, str]], fallback: Any):
        self._names, self._fallback = names, fallback

    def __getattr__(self, name: str) -> Any:
        if name in self._names:
            value = _resolve(self._names[name])
            setattr(self, name, value)
            return value
        return getattr(self._fallback(), name)


class _LightNames(types.ModuleType):
    """A module that answers the names in `LIGHT` and `NAMESPACES` from TensorFlow's
    modules until TensorFlow's `__init__` has run, and everything else from `real()`."""

    LIGHT: ClassVar[dict[str, tuple[str, str]]] = {}
    NAMESPACES: ClassVar[dict[str, dict[str, tuple[str, str]]]] = {}

    def real(self) -> Any:
        raise NotImplementedError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name not in self.LIGHT:
            raise AttributeError(name)
        if not _state["full"] and name in self.LIGHT:
            value = _resolve(self.LIGHT[name])
        elif not _state["full"] and name in self.NAMESPACES:
            value = _Namespace(self.NAMESPACES[name], lambda: getattr(self.real(), name))
        else:
            return getattr(self.real(), name)
        self.__dict__[name] = value
        return value


class _StandIn(_LightNames):
    """`tensorflow` before its `__init__` ran (see the module docstring)."""

    LIGHT, NAMESPACES = _LIGHT, _NAMESPACES

    def real(self) -> Any:
        return load_fully()


class _CompatV1(_LightNames):
    """`tensorflow.compat.v1` before TensorFlow's `__init__` ran."""

    LIGHT, NAMESPACES = _V1_LIGHT, _V1_NAMESPACES

    def real(self) -> Any:
        return load_fully().compat.v1


class _DeferredPackage(types.ModuleType):
    """A package of tf.data (`tensorflow.python.data`, its `experimental`) before its
    `__init__` ran. Those `__init__`s only gather tf.data's public names (data service,
    readers, every experimental transformation: seconds of imports); reverb and tf.data's
    own modules import the modules under them by their full names. The first name asked
    of the package itself runs the real `__init__`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        _run_package_init(self)
        return getattr(self, name)


def _run_package_init(module: types.ModuleType) -> None:
    with _full_import:
        if type(module) is _DeferredPackage:
            module.__class__ = types.ModuleType
            module.__spec__.loader.exec_module(module)


def _defer_package(name: str, package_path: str) -> None:
    """Puts a `_DeferredPackage` for the package at `package_path` into `sys.modules`
    (submodules import from its path as usual)."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(package_path, "__init__.py"), submodule_search_locations=[package_path]
    )
    sys.modules[name] = _unexecuted_package(_DeferredPackage, spec)


def _unexecuted_package(cls: type[types.ModuleType], spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
    """A `cls` module for the package `spec` describes, its `__init__` not run."""
    module = cls(spec.name)
    module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, spec.origin
    module.__path__, module.__package__ = list(spec.submodule_search_locations), spec.name
    return module


# Packages whose `__init__` waits for the first name asked of them, outermost first.
_DEFERRED = ("tensorflow.python.data", "tensorflow.python.data.experimental")
_state: dict[str, Any] = {"stand_in": None, "full": False, "behaviour": False}
# Threads (actor, learner) may ask for a full import at once: one runs it, the others wait.
_full_import = threading.RLock()


def installed() -> bool:
    """Whether `tensorflow` is the stand-in and TensorFlow's `__init__` has not run yet."""
    return _state["stand_in"] is not None and not _state["full"]


def load_fully() -> types.ModuleType:
    """Runs TensorFlow's `__init__` into the stand-in (once) and returns the module."""
    module = _state["stand_in"]
    if module is None:
        return importlib.import_module("tensorflow")
    with _full_import:
        if not _state["full"]:
            _state["full"] = True
            for name in ("tensorflow.compat.v1", "tensorflow.compat"):
                sys.modules.pop(name, None)
            for name in [*_LIGHT, *_NAMESPACES, "compat"]:
                module.__dict__.pop(name, None)
            # tf.data's packages first, innermost first, as TensorFlow's own order has them:
            # its public tree imports the data service's modules, which need theirs.
            for name in _DEFERRED[::-1]:
                _run_package_init(sys.modules[name])
            module.__class__ = types.ModuleType
            module.__spec__.loader.exec_module(module)
    return module


class _FullImportFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on `sys.meta_path`: a module of TensorFlow's public tree that no file provides
    (`tensorflow.keras`, `tensorflow.compat.v2`: TensorFlow's `__init__` makes them) runs
    the full import and hands over the module it made. Misses elsewhere (TensorFlow's own
    optional imports under `tensorflow.python`) stay misses."""

    def __init__(self) -> None:
        self._specs: dict[str, Any] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if _state["stand_in"] is None or name.rpartition(".")[0] not in ("tensorflow", "tensorflow.compat"):
            return None
        load_fully()
        module = sys.modules.get(name)
        if module is None:
            parent, _, child = name.rpartition(".")
            module = getattr(sys.modules.get(parent), child, None)
        if not isinstance(module, types.ModuleType):
            return None
        return importlib.machinery.ModuleSpec(name, self, origin="tensorflow")

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = sys.modules.get(spec.name)
        if module is None:
            parent, _, child = spec.name.rpartition(".")
            module = getattr(sys.modules[parent], child)
        self._specs[spec.name] = getattr(module, "__spec__", None)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        # The import system set our spec on TensorFlow's module: give it back its own.
        module.__spec__ = self._specs.pop(module.__name__, None)


class _Unimportable(importlib.abc.MetaPathFinder):
    """First on `sys.meta_path` inside `import_without_tensorflow`: no `tensorflow` at all."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


def import_without_tensorflow(name: str) -> types.ModuleType:
    """Imports `name` (rlax, distrax) as if TensorFlow were not installed, when the
    stand-in is in place.

    Both bring TensorFlow Probability's JAX substrate, which imports `tensorflow.compat.v2`
    only to copy TensorFlow's docstrings onto its functions, and loads TFP's TensorFlow
    part when it finds TensorFlow imported: either would run TensorFlow's full import.
    For the import, every `tensorflow` module leaves `sys.modules` and none can be
    imported, so TFP takes its JAX-only path; then they come back. One thread at a time
    (another one waits, then finds the module imported).
    """
    with _full_import:
        if not installed() or name in sys.modules:
            return importlib.import_module(name)
        hidden = {key: sys.modules.pop(key) for key in list(sys.modules) if key.split(".")[0] == "tensorflow"}
        blocker = _Unimportable()
        sys.meta_path.insert(0, blocker)
        try:
            return importlib.import_module(name)
        finally:
            sys.meta_path.remove(blocker)
            sys.modules.update(hidden)


def _standard_library_distutils() -> None:
    """reverb checks TensorFlow's version with `distutils.version` as it loads. On Python
    3.11 setuptools' shim (its .pth file) serves `distutils` from setuptools, whose import
    (pkg_resources) costs about half a second; the standard library's `distutils` still
    exists there and costs milliseconds. This makes the process what it would be had it
    started with SETUPTOOLS_USE_DISTUTILS=stdlib, setuptools' own switch: the shim leaves
    `sys.meta_path`, and the variable tells setuptools, if anything imports it later, and
    child processes, to use the standard library's too. Not when the variable is set,
    distutils or setuptools is already imported, or Python has no distutils (3.12)."""
    shim = sys.modules.get("_distutils_hack")
    if (
        shim is None
        or sys.version_info >= (3, 12)
        or "SETUPTOOLS_USE_DISTUTILS" in os.environ
        or "distutils" in sys.modules
        or "setuptools" in sys.modules
    ):
        return
    os.environ["SETUPTOOLS_USE_DISTUTILS"] = "stdlib"
    shim.remove_shim()


def install() -> None:
    """Puts the stand-in in place unless TensorFlow is already imported, missing, or
    `RL_LAZY_TENSORFLOW=0`."""
    if "tensorflow" in sys.modules or os.environ.get("RL_LAZY_TENSORFLOW", "1") == "0":
        return
    _standard_library_distutils()
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return
    os.environ["TF2_BEHAVIOR"] = "1"  # As TensorFlow's __init__ sets it, first thing.
    module = _unexecuted_package(_StandIn, spec)
    compat = types.ModuleType("tensorflow.compat")
    compat.__path__ = []
    v1 = _CompatV1("tensorflow.compat.v1")
    compat.v1 = v1
    module.__dict__["compat"] = compat
    _state["stand_in"] = module
    sys.meta_path.append(_FullImportFinder())
    for name in _DEFERRED:
        _defer_package(name, os.path.join(module.__path__[0], *name.split(".")[1:]))
    sys.modules.update({"tensorflow": module, "tensorflow.compat": compat, "tensorflow.compat.v1": v1})
