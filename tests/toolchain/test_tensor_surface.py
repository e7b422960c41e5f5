"""Kernel code sees only the NKI tensor API: every route to the host data is refused with a clear error.

Each route is one small kernel (the body below, spliced into a classic or new-API kernel that loads
both inputs into tiles ``x`` and ``y``) that tries to get the task's answer, ``a + b``, by computing on
the host instead of with NKI. The line marked ``# route`` must be reported with the expected id and a
message naming what was used. Positive tests pin that the documented attributes and views keep working
in both generations (``docs/toolchain.md``, "What kernel code can reach").
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.judging.verify import verify_files

TASK = Path(__file__).resolve().parents[1] / "fixtures" / "host_access" / "task.py"

NEW = """\
import copy
import pickle

import numpy as np
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(b.shape, dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.dma_copy(dst=y, src=b)
{body}
    return out
"""

CLASSIC = """\
import copy
import pickle

import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def kernel(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
{body}
    return out
"""

HOST = "sim_host_access"
FLOW = "err_dynamic_control_flow_not_supported"

# id -> (kernel template, body (the line marked # route must be reported), expected id, message fragment)
ROUTES = {
    "storage_array": (NEW, "out.storage.array[...] = a.storage.array + b.storage.array  # route", HOST,
                      "no attribute 'storage'"),
    "np_asarray": (CLASSIC, "nl.store(out, value=np.asarray(x) + np.asarray(y))  # route", HOST, "np.asarray"),
    "np_array": (CLASSIC, "nl.store(out, value=np.array(x) + np.array(y))  # route", HOST, "np.array"),
    "np_float32": (NEW, "s = np.float32(x[0:1, 0:1])  # route", HOST, "np.float32"),
    "np_add_ufunc": (CLASSIC, "nl.store(out, value=np.add(x, y))  # route", HOST, "np.add"),
    "np_add_scalar": (NEW, "h = np.add(x, 1)  # route", HOST, "np.add"),
    "np_exp_ufunc": (NEW, "h = np.exp(x)  # route", HOST, "np.exp"),
    "ufunc_method": (NEW, "h = np.add.reduce(x)  # route", HOST, "np.add.reduce"),
    "dunder_array": (CLASSIC, "nl.store(out, value=x.__array__() + y.__array__())  # route", HOST, "x.__array__"),
    "np_copyto": (CLASSIC, "buf = np.zeros((128, 512), np.float32)\nnp.copyto(buf, x)  # route", HOST, "np.copyto"),
    "np_sum": (NEW, "h = np.sum(x)  # route", HOST, "np.sum"),
    "np_concatenate": (NEW, "h = np.concatenate([x, y])  # route", HOST, "np.concatenate"),
    "inplace_host_array": (CLASSIC, "buf = np.zeros((128, 512), np.float32)\nbuf += x  # route", HOST, "NumPy"),
    "read_method": (NEW, "h = x.read() + y.read()  # route", HOST, "no attribute 'read'"),
    "private_view": (NEW, "h = x._view  # route", HOST, "no attribute '_view'"),
    "arr_slot": (CLASSIC, "h = x.arr  # route", HOST, "no attribute 'arr'"),
    "tolist": (NEW, "h = x.tolist()  # route", HOST, "no attribute 'tolist'"),
    "item": (NEW, "h = x[0:1, 0:1].item()  # route", HOST, "no attribute 'item'"),
    "array_interface": (NEW, "h = x.__array_interface__  # route", HOST, "__array_interface__"),
    "vars": (NEW, "h = vars(x)  # route", HOST, "__dict__"),
    "dunder_dict": (CLASSIC, "h = x.__dict__  # route", HOST, "__dict__"),
    "object_getattribute": (NEW, "h = object.__getattribute__(x, 'storage')  # route", HOST, "'storage'"),
    "set_attribute": (NEW, "x.storage = None  # route", HOST, "cannot set 'storage'"),
    "pickle": (NEW, "h = pickle.dumps(x)  # route", HOST, "pickling"),
    "copy": (CLASSIC, "h = copy.copy(x)  # route", HOST, "copying"),
    "deepcopy": (NEW, "h = copy.deepcopy([x])  # route", HOST, "copying"),
    "reduce_ex": (NEW, "h = object.__reduce_ex__(x, 2)  # route", HOST, "pickling"),
    "index_values": (CLASSIC, "h = (nl.arange(128)[:, None] + x).values  # route", HOST, "no attribute 'values'"),
    "float": (NEW, "h = float(x[0:1, 0:1])  # route", FLOW, "Python number"),
    "int": (CLASSIC, "h = int(x[0:1, 0:1])  # route", FLOW, "Python integer"),
    "complex": (NEW, "h = complex(x[0:1, 0:1])  # route", FLOW, "Python number"),
    "index": (NEW, "h = [0, 1][x[0:1, 0:1]]  # route", FLOW, "Python integer"),
    "iterate": (CLASSIC, "h = list(x)  # route", FLOW, "iterating"),
    "contains": (NEW, "h = 1.0 in x  # route", FLOW, "`in`"),
    "bool": (NEW, "h = 1 if x[0:1, 0:1] else 0  # route", FLOW, "dynamic control-flow"),
    "construct": (NEW, "h = nl.tensor((128, 512), np.float32)  # route", "sim_unsupported_api", "nl.ndarray"),
    "slice_bound": (NEW, "i = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)\nh = a[i:i + 1, :]  # route", FLOW,
                    "static index"),
    "nested_simulate": (NEW, "def _ident(t):\n    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)\n"
                             "    nisa.dma_copy(dst=o, src=t)\n    return o\n\n"
                             "h = nki.simulate(_ident)(a).tolist()  # route", HOST, "no attribute 'tolist'"),
}


def _kernel(tmp_path: Path, template: str, body: str) -> tuple[Path, int]:
    src = template.format(body=textwrap.indent(body, "    "))
    path = tmp_path / "kernel.py"
    path.write_text(src)
    line = next(i for i, text in enumerate(src.splitlines(), start=1) if "# route" in text)
    return path, line


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_host_access_route_is_refused(tmp_path: Path, route: str) -> None:
    template, body, code, fragment = ROUTES[route]
    path, line = _kernel(tmp_path, template, body)
    res = verify_files(str(path), str(TASK), seeds=1)
    assert not res.correct
    assert res.problems, route
    first = res.problems[0]
    assert first.code == code, f"{route}: {first.code}: {first.message}"
    assert fragment in first.message, first.message
    assert first.location is not None and first.location.line == line, (route, first.location, line)
    if code == HOST:
        assert "not part of NKI" in first.message or "nl.* / nisa.*" in first.message, first.message


def test_the_refusal_names_the_route_through_the_sandboxed_worker(tmp_path: Path) -> None:
    path, line = _kernel(tmp_path, NEW, ROUTES["storage_array"][1])
    res = api.verify(str(path), str(TASK), seeds=1)
    assert res.correct is False
    first = res.problems[0]
    assert first.code == HOST and "no attribute 'storage'" in first.message, res.problems
    assert first.location.line == line
    path, line = _kernel(tmp_path, CLASSIC, ROUTES["np_asarray"][1])
    res = api.verify(str(path), str(TASK), seeds=1)
    assert res.correct is False and res.problems[0].code == HOST, res.problems
    assert "np.asarray" in res.problems[0].message and res.problems[0].location.line == line


def test_a_class_swap_cannot_reach_the_hidden_slot(tmp_path: Path) -> None:
    body = ("class Probe:\n    __slots__ = ('_v',)\n\n"
            "object.__setattr__(x, '__class__', Probe)  # route")
    path, line = _kernel(tmp_path, NEW, body)
    res = verify_files(str(path), str(TASK), seeds=1)
    assert not res.correct and res.problems[0].code == "sim_python_exception"
    assert "layout differs" in res.problems[0].message and res.problems[0].location.line == line


def test_redirected_stdout_does_not_see_device_print_values(tmp_path: Path) -> None:
    """``nl.device_print`` writes to the stderr descriptor, not to a ``sys.stdout`` the kernel swapped."""
    body = ("import io, sys\n_buf, _old = io.StringIO(), sys.stdout\nsys.stdout = _buf\n"
            "nl.device_print('x', x)\nsys.stdout = _old\n"
            "assert _buf.getvalue() == '', _buf.getvalue()  # route\n"
            "nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)\nnisa.dma_copy(dst=out, src=x)")
    path, _ = _kernel(tmp_path, NEW, body)
    res = verify_files(str(path), str(TASK), seeds=1)
    assert res.correct, res.problems


def test_inputs_passed_through_varargs_and_containers_are_tensors(tmp_path: Path) -> None:
    src = NEW.replace("def kernel(a, b):", "def kernel(*args, **kw):\n    (a, b), = [args] if args else [(kw['a'], kw['b'])]")
    body = ("assert [type(t).__name__ for t in args] == ['Tensor', 'Tensor'], args\n"
            "nisa.tensor_tensor(dst=x, data1=x, data2=y, op=nl.add)\nnisa.dma_copy(dst=out, src=x)")
    path = tmp_path / "kernel.py"
    path.write_text(src.format(body=textwrap.indent(body, "    ")))
    res = verify_files(str(path), str(TASK), seeds=1)
    assert res.correct, res.problems


# -- documented attributes keep working -------------------------------------------------------------------

SURFACE_NEW = """\
    assert x.shape == (128, 512) and x.ndim == 2 and x.size == 128 * 512 and x.itemsize == 4
    assert x.dtype == a.dtype == nl.float32 and x.buffer == nl.sbuf and a.buffer == nl.shared_hbm
    assert isinstance(x.name, str) and "Tensor(" in repr(x) and len(x) == 128
    assert nl.tile_size.pmax == 128 and x.shape[0] <= nl.tile_size.pmax
    assert x.strides == (512, 1) and x.offset == 0 and x.get_pattern() == [[512, 128], [1, 512]]
    assert x[0:64, 256:].offset == 256 and x[0:64, 256:].strides == (512, 1) and not x.is_indirect()
    assert x.is_contiguous() and hasattr(x, "shape") and not hasattr(x, "storage")
    assert x.reshape((128, 2, 256)).shape == (128, 2, 256)
    assert x.reshape((128, 2, 256)).flatten_dims(1, 2).shape == (128, 512)
    assert x.view(nl.int32).dtype == nl.int32 and x.reinterpret_cast(nl.uint32).shape == (128, 512)
    assert x.expand_dim(1).shape == (128, 1, 512) and x.expand_dim(1).squeeze_dim(1).shape == (128, 512)
    assert x.reshape_dim(1, (4, 128)).shape == (128, 4, 128)
    assert x.reshape((128, 2, 256)).permute((0, 2, 1)).shape == (128, 256, 2)
    assert x[:, 0:1].broadcast(1, 8).shape == (128, 8)
    assert x.slice(1, 0, 256).shape == (128, 256) and x.select(1, 3).shape == (128, 1)
    assert a[0].shape == (512,) and a[0:1, :].shape == (1, 512) and a[..., 0:2].shape == (128, 2)
    assert x.ap([[512, 128], [1, 256]], offset=256).shape == (128, 256)
    left = x[:, 0:256]
    right = y[:, 256:512]
    nisa.tensor_tensor(dst=left, data1=left, data2=y[:, 0:256], op=nl.add)
    nisa.tensor_tensor(dst=x.ap([[512, 128], [1, 256]], offset=256), data1=x[:, 256:512], data2=right,
                       op=nl.add)
    nisa.dma_copy(dst=out, src=x)
"""

SURFACE_CLASSIC = """\
    assert x.shape == (128, 512) and x.ndim == 2 and x.itemsize == 4 and x.dtype == np.float32
    assert x.buffer == nl.sbuf and a.buffer == nl.shared_hbm and nl.tile_size.pmax == 128
    assert x.reshape((128, 2, 256)).shape == (128, 2, 256) and x.expand_dims(1).shape == (128, 1, 512)
    assert x.assert_shape((128, 512)) is x and x.view(np.int32).dtype == np.int32
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    s = x[i_p, i_f] + y                     # Python operators are NKI ops
    s2 = 2.0 * s - s                        # a Python scalar on the left
    s3 = np.float32(1.0) * s2               # a NumPy scalar on the left defers to the tile
    s4 = (i_p * 0 + s3).astype(np.float32)  # an index expression on the left
    acc = nl.zeros((128, 512), dtype=np.float32)
    acc += s4
    t = nl.ndarray((128, 512), dtype=np.float32)
    t[...] = acc
    nl.store(out, value=t.broadcast_to((128, 512)))
"""


@pytest.mark.parametrize(("template", "body"), [(NEW, SURFACE_NEW), (CLASSIC, SURFACE_CLASSIC)], ids=["new", "classic"])
def test_the_documented_tensor_api_keeps_working(tmp_path: Path, template: str, body: str) -> None:
    path = tmp_path / "kernel.py"
    path.write_text(template.format(body=body))
    res = verify_files(str(path), str(TASK), seeds=2)
    assert res.correct, [(p.code, p.message, p.location) for p in res.problems]


def test_the_toolchain_itself_still_converts_tensors() -> None:
    """Inputs in and outputs out go through the toolchain's own accessor (``tensor.host_copy``)."""
    from nki_agent.toolchain.sim import tensor
    from nki_agent.toolchain.sim.buffers import shared_hbm
    from nki_agent.toolchain.sim.kernel import to_numpy_input

    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tensor.wrap_array(arr.copy(), shared_hbm, "t")
    np.testing.assert_array_equal(to_numpy_input(t), arr)
    np.testing.assert_array_equal(tensor.host_copy(t), arr)
    assert "0." not in repr(t) and "5." not in repr(t) and "shape=(2, 3)" in repr(t)
    with pytest.raises(Exception, match="NumPy on an NKI tensor"):
        np.asarray(t)
    with pytest.raises(TypeError):
        np.add(t, 1)
    assert isinstance(tensor.view_of(t).storage.array, np.ndarray)
    assert not hasattr(tensor.Tensor, "__slots__") and not any(k.startswith("_h") for k in vars(tensor.Tensor))
