"""serveplan's compiled functions run as plain Python: the same code, uncompiled.

A process whose compiled code is not in numba's cache yet can run the simulator as Python
instead of waiting for the compile (:mod:`serveplan.kernels.jit_mode` decides when). Every
compiled function keeps its Python source (``py_func``), and the simulator's code runs
unchanged as Python: numba compiles a subset of Python whose meaning it keeps.

Calling ``py_func`` alone is not enough: the functions it calls are module globals bound to
numba dispatchers, so each nested call would go back through a dispatcher. :func:`as_python`
gives a function whose globals are a copy of its module's namespace with every dispatcher
replaced by *its* Python function, so a whole call tree runs as direct Python calls -- as fast as
numba's ``NUMBA_DISABLE_JIT``, which cannot be switched on or off inside a process.

Two differences from compiled code are handled here: fixed-width integer arithmetic that
wraps in compiled code (the prefix-hash mixer multiplies ``uint64`` on purpose) warns in
NumPy, and a float division by zero that ``error_model="numpy"`` turns into ``inf``
warns too; :func:`call_as_python` runs with NumPy's floating-point and overflow warnings off. Results
are the same as compiled ones (``tests/test_interpret.py`` holds whole runs equal).
"""

from __future__ import annotations

import sys
import types

import numpy as np
from numba.core.dispatcher import Dispatcher as _NumbaDispatcher

_TWINS: dict[int, tuple[object, types.FunctionType]] = {}
_NAMESPACES: dict[str, dict] = {}


def as_python(dispatcher) -> types.FunctionType:
    """``dispatcher``'s Python function, calling the Python functions of what it calls.

    Its globals are a copy of its module's namespace, registered before it is filled, so
    functions that call each other (across modules too) resolve to finished functions.
    """
    found = _TWINS.get(id(dispatcher))
    if found is not None:
        return found[1]
    fn = dispatcher.py_func
    namespace = _NAMESPACES.get(fn.__module__)
    fill = namespace is None
    if fill:
        namespace = _NAMESPACES[fn.__module__] = dict(vars(sys.modules[fn.__module__]))
    made = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    made.__kwdefaults__, made.__doc__ = fn.__kwdefaults__, fn.__doc__
    made.__qualname__, made.__module__ = fn.__qualname__, fn.__module__
    _TWINS[id(dispatcher)] = (dispatcher, made)
    if fill:
        for name, value in list(namespace.items()):
            if isinstance(value, _NumbaDispatcher):
                namespace[name] = as_python(value)
    return made


def call_as_python(dispatcher, args, kwargs):
    """Run ``dispatcher``'s function as Python (module doc)."""
    with np.errstate(all="ignore"):
        return as_python(dispatcher)(*args, **kwargs)


__all__ = ["as_python", "call_as_python"]
