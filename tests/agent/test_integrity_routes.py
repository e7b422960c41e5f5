"""The static integrity check, route by route: each way a candidate could reach the task, the reference,
the verifier, files or interpreter state is refused with its reason; real kernels pass untouched.

``ROUTES``: (snippet, expected reason). Each snippet is appended to a real example kernel, and the
candidate must get a violation containing the reason -- also as a *new* violation against the
unchanged kernel, which is what the agent's tools refuse on. The no-false-positive tests run the
check over every example kernel, the fixture kernels the tests use and the whole mutation suite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nki_agent.agent import mutations
from nki_agent.agent.integrity import new_violations, violations

ROOT = Path(__file__).resolve().parents[2]
BASE = (ROOT / "examples" / "l1_add" / "kernel_new.py").read_text()
TASK = str(ROOT / "examples" / "l1_add" / "task.py")
NP = "import numpy as np\n"
MODULE = "a module through another module"
FRAMES = "frames, code objects and class internals"
BY_STRING = "a look-up by a string chosen at run time"

ROUTES: list[tuple[str, str]] = [
    # imports: files, processes, interpreter state (any alias, any form)
    ("import posix", "imports 'posix', which a kernel never needs"),
    ("import nt", "imports 'nt', which a kernel never needs"),
    ("import _posixsubprocess", "imports the private module '_posixsubprocess'"),
    ("import _io", "imports the private module '_io'"),
    ("import io\nf = io.open('task.py')", "imports 'io', which a kernel never needs"),
    ("from io import FileIO", "imports 'io', which a kernel never needs"),
    ("import _thread", "imports the private module '_thread'"),
    ("import _xxsubinterpreters", "imports the private module '_xxsubinterpreters'"),
    ("import _interpreters", "imports the private module '_interpreters'"),
    ("import interpreters", "imports 'interpreters', which a kernel never needs"),
    ("import ctypes", "imports 'ctypes', which a kernel never needs"),
    ("import importlib", "imports 'importlib', which a kernel never needs"),
    ("import importlib.util as iu", "imports 'importlib.util', which a kernel never needs"),
    ("import builtins", "imports 'builtins', which a kernel never needs"),
    ("import marshal", "imports 'marshal', which a kernel never needs"),
    ("import pickle", "imports 'pickle', which a kernel never needs"),
    ("import gc", "imports 'gc', which a kernel never needs"),
    ("import inspect", "imports 'inspect', which a kernel never needs"),
    ("import sys as _s", "imports 'sys', which a kernel never needs"),
    ("from sys import modules as m", "imports 'sys', which a kernel never needs"),
    ("import os.path as p", "imports 'os.path', which a kernel never needs"),
    ("import types", "imports 'types', which a kernel never needs"),
    ("import string", "imports 'string', which a kernel never needs"),
    ("import json", "imports 'json', a standard-library module kernels do not use"),
    ("import task", "imports the task module 'task'"),
    ("from task import reference", "imports the task module 'task'"),
    ("from . import helpers", "relative import"),
    ("from numpy import *", "star import"),
    ("import numpy._core", "imports 'numpy._core': touches the private attribute _core"),
    ("import numpy.core.multiarray", "imports 'numpy.core.multiarray': uses numpy.core"),
    ("from numpy import load", "imports load from numpy: uses .load (file access"),
    ("from numpy.lib import format", "imports 'numpy.lib': uses numpy.lib"),
    ("from warnings import sys", "imports sys from warnings: uses .sys: " + MODULE),
    ("from functools import wraps", "imports wraps from functools: uses .wraps: copies attributes"),
    ("from operator import attrgetter", "imports attrgetter from operator: uses .attrgetter: " + BY_STRING),
    ("from builtins import open", "imports 'builtins'"),
    ("import torch\ntorch.load('weights.pt')", "uses .load (file access"),
    ("import torch\nx = torch.utils.cpp_extension", "uses torch.utils, library internals"),
    ("import ml_dtypes\nx = ml_dtypes.np.lib", "uses .np of another module"),
    ("x = nl.np.save", "uses .save (file access"),
    # modules reached through other modules
    ("import warnings\nm = warnings.sys.modules", "uses .sys: " + MODULE),
    (NP + "m = np.sys.modules", "uses .sys: " + MODULE),
    ("import typing\nm = typing.sys", "uses .sys: " + MODULE),
    (NP + "m = np.random.modules", "uses .modules: " + MODULE),
    ("t = nl.tile_size.sys.modules", "uses .sys: " + MODULE),
    (NP + "np.os.system('true')", "uses .os: " + MODULE),
    (NP + "f = np.core.multiarray.fromfile", "uses numpy.core, library internals"),
    (NP + "f = np.core.multiarray.fromfile", "uses .fromfile (file access"),
    (NP + "f = np.ctypeslib.as_array", "uses .ctypeslib: " + MODULE),
    (NP + "p = np.zeros(3).ctypes.data", "uses .ctypes: " + MODULE),
    (NP + "f = np.lib.stride_tricks.as_strided", "uses numpy.lib, library internals"),
    ("import functools\nfunctools.update_wrapper(nl, add_kernel)", "uses .update_wrapper: copies attributes"),
    # look-ups by a string
    ("import operator\nf = operator.attrgetter('sys')", "uses .attrgetter: " + BY_STRING),
    ("import operator\nf = operator.methodcaller('save', 'x')", "uses .methodcaller: " + BY_STRING),
    ("import operator\nf = operator.attrgetter('s' + 'ys')", "uses .attrgetter: " + BY_STRING),
    ("import functools\nf = functools.partial(getattr, nl)", "uses getattr, which a kernel never needs"),
    ("import typing\nh = typing.get_type_hints(add_kernel)", "uses .get_type_hints: " + BY_STRING),
    ("import typing\nr = typing.ForwardRef('np.sys')", "uses .ForwardRef: " + BY_STRING),
    # dunders, frames, code objects
    ("s = object.__subclasses__()", "uses object, which a kernel never needs"),
    ("s = ().__class__.__mro__", "touches the private attribute __class__"),
    ("s = ().__class__.__mro__", "touches the private attribute __mro__"),
    ("b = nl.ndarray.__base__", "touches the private attribute __base__"),
    ("g = add_kernel.__globals__", "touches the private attribute __globals__"),
    ("b = add_kernel.__builtins__", "touches the private attribute __builtins__"),
    ("o = __builtins__['open']", "uses __builtins__, which a kernel never needs"),
    ("c = add_kernel.__code__", "touches the private attribute __code__"),
    ("c = add_kernel.__closure__", "touches the private attribute __closure__"),
    ("d = nl.__dict__", "touches the private attribute __dict__"),
    ("g = (x for x in ()).gi_frame", "uses .gi_frame: " + FRAMES),
    ("def f():\n    try:\n        1 / 0\n    except ZeroDivisionError as e:\n        return e.__traceback__.tb_frame",
     "uses .tb_frame: " + FRAMES),
    ("def f(frame):\n    return frame.f_back.f_globals", "uses .f_globals: " + FRAMES),
    ("def f(frame):\n    return frame.f_back.f_globals", "uses .f_back: " + FRAMES),
    ("def f(code):\n    return code.co_consts", "uses .co_consts: " + FRAMES),
    ("def f(cell):\n    return cell.cell_contents", "uses .cell_contents: " + FRAMES),
    ("m = nl.ndarray.mro()", "uses .mro: " + FRAMES),
    ("def f(x):\n    match x:\n        case nl.ndarray(sys=s):\n            return s",
     "matches a class pattern that uses .sys: " + MODULE),
    ("x = {'__class__': 1}", "spells a dunder name in a string"),
    ("x = 'o.__globals__'", "spells a dunder name in a string"),
    ("x = b'__import__'", "spells a dunder name in a string"),
    ("x = '__cl' + 'ass__'", "spells a dunder name in a string"),
    # builtins that run, open, introspect or look up by string
    ("f = type(add_kernel)(add_kernel, {})", "uses type, which a kernel never needs"),
    ("K = type('K', (), {})", "uses type, which a kernel never needs"),
    ("m = __import__('sys')", "uses __import__, which a kernel never needs"),
    ("f = getattr(nl, 'load')", "uses getattr, which a kernel never needs"),
    ("setattr(nl, 'load', None)", "uses setattr, which a kernel never needs"),
    ("delattr(nl, 'load')", "uses delattr, which a kernel never needs"),
    ("d = vars(nl)", "uses vars, which a kernel never needs"),
    ("g = globals()", "uses globals, which a kernel never needs"),
    ("g = locals()", "uses locals, which a kernel never needs"),
    ("c = compile('1', 'f', 'eval')", "uses compile, which a kernel never needs"),
    ("exec('x = 1')", "uses exec, which a kernel never needs"),
    ("_e = exec", "uses exec, which a kernel never needs"),
    ("v = eval('1')", "uses eval, which a kernel never needs"),
    ("t = open('task.py').read()", "uses open, which a kernel never needs"),
    ("breakpoint()", "uses breakpoint, which a kernel never needs"),
    ("names = dir(nl)", "uses dir, which a kernel never needs"),
    ("help(nl)", "uses help, which a kernel never needs"),
    ("p = __file__", "uses __file__, which a kernel never needs"),
    ("d = __loader__.get_data('task.py')", "uses __loader__, which a kernel never needs"),
    # string-built attribute names
    ("f = getattr(nl, 'lo' + 'ad')", "uses getattr, which a kernel never needs"),
    ("m = vars(nl)['s' + 'ys']", "uses vars, which a kernel never needs"),
    ("m = nl.__dict__['s' + 'ys']", "touches the private attribute __dict__"),
    ("m = nl.__getattribute__('s' + 'ys')", "touches the private attribute __getattribute__"),
    (NP + "s = '{0.sys.modules}'.format(np)", "formats {0.sys.modules}, a field that looks attributes or items up"),
    ("s = '{m[task]}'.format_map({})", "formats {m[task]}, a field that looks attributes or items up"),
    (NP + "s = '{0:{1.sys}}'.format(1, np)", "formats {1.sys}, a field that looks attributes or items up"),
    (NP + "s = str.format('{0.os}', np)", "formats {0.os}, a field that looks attributes or items up"),
    (NP + "s = ('{0.s' + 'ys}').format(np)", "calls .format on a template that is not a literal"),
    (NP + "t = '{0.' + 'os}'\ns = t.format(np)", "calls .format on a template that is not a literal"),
    # a module handed around as a value (so its attributes escape the checks above)
    (NP + "m = np\nm.isclose(1, 1)", "uses the module np as a value"),
    (NP + "for m in (np,):\n    pass", "uses the module np as a value"),
    ("def f(m=nl):\n    return m", "uses the module nl as a value"),
    # monkeypatching, files
    (NP + "np.isclose = lambda *a, **k: True", "assigns to the attribute .isclose"),
    ("def f():\n    global add_kernel", "declares globals"),
    (NP + "np.zeros(3).tofile('kernel.py')", "uses .tofile (file access"),
    (NP + "np.save('out.npy', np.zeros(3))", "uses .save (file access"),
    (NP + "a = np.memmap('task.py')", "uses .memmap (file access"),
]


@pytest.mark.parametrize(("snippet", "reason"), ROUTES, ids=[f"{k}:{r[0][:40]}" for k, r in enumerate(ROUTES)])
def test_each_route_is_refused_with_its_reason(snippet: str, reason: str) -> None:
    candidate = BASE + "\n" + snippet + "\n"
    found = violations(candidate, TASK)
    assert any(reason in v for v in found), found
    assert any(reason in v for v in new_violations(candidate, BASE, TASK))


EXAMPLE_KERNELS = sorted((ROOT / "examples").glob("*/kernel_*.py"))
FIXTURE_KERNELS = sorted(p for d in ("broken", "quickfix", "sim_fixes", "static", "masks", "loop_reduce")
                         for p in (ROOT / "tests" / "fixtures" / d).rglob("*.py"))


def test_every_example_kernel_passes() -> None:
    assert len(EXAMPLE_KERNELS) == 32
    assert {str(p.relative_to(ROOT)): violations(p.read_text(), str(p.parent / "task.py"))
            for p in EXAMPLE_KERNELS} == {str(p.relative_to(ROOT)): [] for p in EXAMPLE_KERNELS}


def test_the_fixture_kernels_the_tests_use_pass() -> None:
    assert len(FIXTURE_KERNELS) > 50
    bad = {str(p.relative_to(ROOT)): v for p in FIXTURE_KERNELS if (v := violations(p.read_text()))}
    assert bad == {}


def test_every_mutant_of_the_mutation_suite_passes() -> None:
    suite = mutations.mutants()
    assert len(suite) > 100
    assert {m.id: v for m in suite if (v := violations(m.text, m.task_path))} == {}


def test_a_users_own_violation_is_not_new() -> None:
    original = "import os\n" + BASE
    assert violations(original) and new_violations(original + "\n# edited\n", original) == []
    assert new_violations("import os\nimport os\n" + BASE, original)  # a second use is new
