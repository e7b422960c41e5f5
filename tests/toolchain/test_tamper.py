"""The kernel role's tamper tripwire (``toolchain/isolation/tamper.py``): what it refuses, what it must not."""

from __future__ import annotations

from pathlib import Path

import pytest

from nki_agent.toolchain import api
from nki_agent.toolchain.isolation.tamper import findings

ROOT = Path(__file__).resolve().parents[2]
ADD = ROOT / "examples" / "l1_add"

REFUSED = {
    "rebind_numpy": ("import numpy as np\nnp.subtract = np.add\n", "rebinds an attribute of module `np`"),
    "rebind_nested": ("import nki.language as nl\nnl.add.__doc__ = ''\n", "rebinds an attribute of module `nl`"),
    "delete_attr": ("import numpy as np\ndel np.isclose\n", "rebinds an attribute of module `np`"),
    "setattr_module": ("import numpy as np\nsetattr(np, 'isclose', None)\n", "setattr() on module `np`"),
    "vars_module": ("import numpy as np\nvars(np)['isclose'] = None\n", "vars() on module `np`"),
    "module_dict": ("import numpy as np\nnp.__dict__['isclose'] = 1\n", "namespace of module `np`"),
    "sys_modules": ("import sys\nm = sys.modules['numpy']\n", "sys.modules"),
    "globals_of_function": ("def f(t):\n    return t.reshape.__func__.__globals__\n", ".__globals__"),
    "code_object": ("def f(g):\n    g.__code__ = None\n", ".__code__"),
    "subclasses": ("x = object.__subclasses__()\n", ".__subclasses__"),
    "frames": ("import sys\nf = sys._getframe(1).f_back\n", "interpreter internals"),
    "import_toolchain": ("from nki_agent.toolchain import verify\n", "imports from nki_agent.toolchain"),
    "import_gc": ("import gc\n", "imports gc"),
    "subinterpreter": ("import _xxsubinterpreters\n", "imports _xxsubinterpreters"),
    "meta_path": ("import sys\nsys.meta_path.insert(0, object())\n", ".meta_path"),
    "in_a_kernel_body": ("import numpy as np\ndef k(a):\n    np.add = np.subtract\n    return a\n", "module `np`"),
}
ALLOWED = {
    "dataclass_dict": "from dataclasses import dataclass\n@dataclass\nclass C:\n    x: int = 1\nprint(C().__dict__)\n",
    "frozen_setattr": "object.__setattr__(cfg, 'cache', {})\n",
    "sys_path_insert": "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\nos.environ.get('X')\n",
    "numpy_use": "import numpy as np\nnp.random.seed(0)\nx = np.zeros(3)\nx[0] = 1\n",
    "main_driver": "import sys\nif __name__ == '__main__':\n    print(sys.modules)\n    import gc\n",
    "local_object_attrs": "class T:\n    pass\nt = T()\nt.shape = (1,)\n",
    "syntax_error": "def f(:\n",
}


@pytest.mark.parametrize(("source", "expected"), list(REFUSED.values()), ids=list(REFUSED))
def test_tampering_is_found(source: str, expected: str) -> None:
    found = findings(source)
    assert found and expected in found[0].what, found


@pytest.mark.parametrize("source", list(ALLOWED.values()), ids=list(ALLOWED))
def test_ordinary_python_is_not_tampering(source: str) -> None:
    assert findings(source) == []


@pytest.mark.parametrize("kernel", sorted(ROOT.glob("examples/*/kernel_*.py")), ids=lambda p: p.parent.name + "/" + p.stem)
def test_no_example_kernel_trips_it(kernel: Path) -> None:
    assert findings(kernel.read_text()) == []


def test_a_tampering_kernel_is_refused_at_its_line(tmp_path: Path) -> None:
    src = (ADD / "kernel_new.py").read_text().replace("op=nl.add", "op=nl.subtract")
    kernel = tmp_path / "kernel.py"
    kernel.write_text("import numpy as np\nnp.subtract = np.add\n" + src)
    res = api.verify(str(kernel), str(ADD / "task.py"), seeds=1)
    assert res.correct is False
    (p,) = [p for p in res.problems if p.code == "sim_sandbox_violation"]
    assert p.location is not None and p.location.line == 2 and "rebinds an attribute of module `np`" in p.message
