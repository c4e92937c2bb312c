"""TensorFlow for reverb without importing all of TensorFlow: `install()` puts a stand-in `tensorflow`
into `sys.modules` that answers `_NAMES` from their defining modules; any other attribute runs
TensorFlow's own `__init__` into it (once). `RL_LAZY_TENSORFLOW=0` turns it off. Pinned to TF 2.15."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from typing import Any

_DTYPES = "tensorflow.python.framework.dtypes"
_DATASETS = "tensorflow.python.data.ops.dataset_ops"
_VERSION = ("tensorflow.python.framework.versions", "__version__")
_LIGHT: dict[str, tuple[str, str]] = {
    "__version__": _VERSION,
    "Tensor": ("tensorflow.python.framework.tensor", "Tensor"),
    "TensorSpec": ("tensorflow.python.framework.tensor_spec", "TensorSpec"),
    "TensorShape": ("tensorflow.python.framework.tensor_shape", "TensorShape"),
    "TypeSpec": ("tensorflow.python.framework.type_spec", "TypeSpec"),
    "as_dtype": (_DTYPES, "as_dtype"),
    "load_op_library": ("tensorflow.python.framework.load_library", "load_op_library"),
    **{name: (_DTYPES, name) for name in ("float32", "float64", "double", "int32", "int64", "uint64", "string")},
}
# Module or namespace: {name: (module, attribute)} of what it answers without the full import.
_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "tensorflow": _LIGHT,
    "tensorflow.version": {"VERSION": _VERSION},
    "tensorflow.data": {"Dataset": (_DATASETS, "DatasetV2"), "AUTOTUNE": (_DATASETS, "AUTOTUNE")},
    "tensorflow.config": {"set_visible_devices": ("tensorflow.python.framework.config", "set_visible_devices")},
    "tensorflow.compat.v1": {**_LIGHT, "to_float": ("tensorflow.python.ops.math_ops", "to_float")},
    "tensorflow.compat.v1.data": {"Dataset": (_DATASETS, "DatasetV1"), "AUTOTUNE": (_DATASETS, "AUTOTUNE")},
    "tensorflow.compat.v1.resource_loader": {
        "get_path_to_datafile": ("tensorflow.python.platform.resource_loader", "get_path_to_datafile"),
    },
}
# Packages whose `__init__` waits for the first name asked of them, outermost first.
_DEFERRED = ("tensorflow.python.data", "tensorflow.python.data.experimental")
_state: dict[str, Any] = {"stand_in": None, "full": False}
# Threads (actor, learner) may ask for a full import at once: one runs it, the others wait.
_full_import = threading.RLock()


@functools.cache
def _behave_as_tensorflow_2() -> None:
    """TensorFlow's `enable_v2_behavior`, once, without its tf.data half (TF2_BEHAVIOR does that)."""
    from tensorflow.python import tf2
    from tensorflow.python.framework import ops, tensor, tensor_shape
    from tensorflow.python.ops import control_flow_v2_toggles, variable_scope

    tf2.enable()
    ops.enable_eager_execution()
    tensor_shape.enable_v2_tensorshape()
    variable_scope.enable_resource_variables()
    tensor.enable_tensor_equality()
    control_flow_v2_toggles.enable_control_flow_v2()


class _Lazy(types.ModuleType):
    """A TensorFlow namespace before TensorFlow's `__init__` ran: answers its `_NAMES`, else the real module's;
    a deferred tf.data package (no `_NAMES`) runs its slow `__init__` when a name is first asked of it."""

    def __getattr__(self, name: str) -> Any:
        names = _NAMES.get(self.__name__, {})
        if name.startswith("__") and name not in names:
            raise AttributeError(name)
        if self.__name__ in _DEFERRED:
            _run_init(self)
            return getattr(self, name)  # A lazy module's names: its real module's, now loaded.
        dotted = f"{self.__name__}.{name}"
        if not _state["full"] and dotted in _NAMES:
            value = _Lazy(dotted)
        elif not _state["full"] and name in names:
            _behave_as_tensorflow_2()
            module, attribute = names[name]
            value = getattr(importlib.import_module(module), attribute)  # TensorFlow's module, by name.
        else:
            return functools.reduce(getattr, dotted.split(".")[1:], load_fully())
        self.__dict__[name] = value
        return value


def _run_init(module: types.ModuleType) -> None:
    """Runs the stand-in's or a deferred package's own `__init__` into it, once."""
    with _full_import:
        if type(module) is not types.ModuleType:
            module.__class__ = types.ModuleType
            module.__spec__.loader.exec_module(module)


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
            for name in [*_LIGHT, "version", "data", "config", "compat"]:
                module.__dict__.pop(name, None)
            # tf.data's packages first, innermost first, as TensorFlow's own order has them.
            for package in [*(sys.modules[name] for name in _DEFERRED[::-1]), module]:
                _run_init(package)
    return module


class _FullImportFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on `sys.meta_path`: a module of TensorFlow's public tree that no file provides
    (`tensorflow.keras`) runs the full import and hands over that module."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        parent, _, child = name.rpartition(".")
        if _state["stand_in"] is None or parent not in ("tensorflow", "tensorflow.compat"):
            return None
        load_fully()
        # A TensorFlow submodule, loaded or reached from its parent module.
        module = sys.modules.get(name) or getattr(sys.modules.get(parent), child, None)
        if not isinstance(module, types.ModuleType):
            return None
        return importlib.machinery.ModuleSpec(name, self, origin="tensorflow", loader_state=(module, module.__spec__))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return spec.loader_state[0]

    def exec_module(self, module: types.ModuleType) -> None:
        module.__spec__ = module.__spec__.loader_state[1]  # The import system set ours: give its own back.


def import_without_tensorflow(name: str) -> types.ModuleType:
    """Imports `name` (rlax, distrax) as if TensorFlow were not installed, when the stand-in is in
    place: TensorFlow Probability's JAX substrate would otherwise run TensorFlow's full import."""
    with _full_import:
        if not installed() or name in sys.modules:
            return importlib.import_module(name)
        hidden = {key: sys.modules.pop(key) for key in list(sys.modules) if key.split(".")[0] == "tensorflow"}
        sys.modules["tensorflow"] = None  # Its import raises ModuleNotFoundError.
        try:
            return importlib.import_module(name)
        finally:
            sys.modules.update(hidden)


def install() -> None:
    """Puts the stand-in in place unless TensorFlow is imported, missing, or `RL_LAZY_TENSORFLOW=0`."""
    if "tensorflow" in sys.modules or os.environ.get("RL_LAZY_TENSORFLOW", "1") == "0":
        return
    # As if started with SETUPTOOLS_USE_DISTUTILS=stdlib: reverb's `distutils.version` skips setuptools' slow shim.
    shim = sys.modules.get("_distutils_hack")
    if shim is not None and "SETUPTOOLS_USE_DISTUTILS" not in os.environ and sys.version_info < (3, 12):
        if "distutils" not in sys.modules and "setuptools" not in sys.modules:
            os.environ["SETUPTOOLS_USE_DISTUTILS"] = "stdlib"
            shim.remove_shim()
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return
    os.environ["TF2_BEHAVIOR"] = "1"  # As TensorFlow's __init__ sets it, first thing.
    module = importlib.util.module_from_spec(spec)  # Its `__init__` not run.
    module.__class__ = _Lazy
    compat = types.ModuleType("tensorflow.compat")
    compat.__path__ = []
    compat.v1 = _Lazy("tensorflow.compat.v1")
    module.__dict__["compat"] = compat
    _state["stand_in"] = module
    sys.meta_path.append(_FullImportFinder())
    for name in _DEFERRED:  # Submodules import from their path as usual.
        path = os.path.join(module.__path__[0], *name.split(".")[1:])
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
        )
        sys.modules[name] = importlib.util.module_from_spec(spec)
        sys.modules[name].__class__ = _Lazy
    sys.modules.update({"tensorflow": module, "tensorflow.compat": compat, "tensorflow.compat.v1": compat.v1})
