"""The candidate kernel may change only itself: refuse code that reaches for the task, the reference
or the verifier.

Verification runs the task's reference and the kernel in one sandboxed process, so a kernel that
patches NumPy, imports the task module or rewrites files could fake a pass. Models do try this when
stuck ("make the test pass"). ``violations(code, task_path)`` lists what a candidate does that no
NKI kernel needs; a candidate with any violation is not run. Tool arguments that try to choose the
task, reference, tolerance or seeds are ignored by the tools (``IGNORED_ARGUMENTS``).

This is a static first line with a clear refusal message, not the boundary (that is the OS jail and the judged,
sandboxed verification): it refuses every route it knows of, by the names the route must spell --

- imports: modules for files, processes and interpreter state, private (``_x``) modules, any
  standard-library module outside ``SAFE_STDLIB``, the task module, relative and star imports;
- builtins that run, open, introspect or look attributes up by string (``FORBIDDEN_NAMES``);
- attributes: private and dunder ones (``__class__``, ``__globals__``, ``__subclasses__`` ...),
  modules reached through other modules (``warnings.sys``, ``np.os``), frames and code objects
  (``f_globals``, ``gi_frame``), look-ups by string (``attrgetter``, ``methodcaller``), attribute
  copiers (``wraps``), file functions on anything that is not NKI (``np.load``, ``arr.tofile``),
  NumPy/torch internals (``np.core``, ``torch.utils``); imported names and ``match`` class patterns
  are held to the same rules;
- values: an imported module used other than as ``module.name`` (passed, stored, aliased), a
  format string that looks up attributes or items (``"{0.sys}".format(np)``) or is not a literal,
  a string spelling a dunder name, attribute assignment, ``global``/``nonlocal``.

String-built names (``getattr(np, "s" + "ys")``) need one of the look-ups above, all refused.
"""

from __future__ import annotations

import ast
import os
import re
import string
import sys

# Modules an NKI kernel file never needs and a cheating one would: files, processes, interpreter state.
FORBIDDEN_MODULES = frozenset({
    "os", "sys", "subprocess", "shutil", "pathlib", "importlib", "builtins", "ctypes", "socket", "inspect", "gc",
    "pickle", "marshal", "signal", "threading", "multiprocessing", "unittest", "io", "posix", "nt", "types",
    "interpreters", "concurrent", "runpy", "code", "codeop", "pdb", "traceback", "linecache", "tempfile", "codecs",
    "weakref", "copyreg", "string", "logging", "contextlib", "site", "sysconfig", "pkgutil", "zipimport",
    # not the standard library: test runners, this tool, and packages that run code or touch files
    "pytest", "nki_agent", "nki_agent_task", "setuptools", "pkg_resources", "pip", "psutil", "cffi", "dill",
    "cloudpickle", "joblib", "pexpect", "sh", "fsspec", "requests", "httpx", "urllib3", "IPython", "pandas"})
# The standard library a kernel may import (everything else of it is refused).
SAFE_STDLIB = frozenset({"__future__", "math", "cmath", "functools", "itertools", "operator", "typing", "dataclasses",
                         "enum", "collections", "numbers", "abc", "statistics", "fractions", "decimal", "random", "re",
                         "copy", "warnings", "time", "textwrap", "heapq", "bisect", "struct", "array"})
# Builtins a kernel never needs; any USE counts (aliasing `_e = exec` or `[exec][0]` is a use).
FORBIDDEN_BUILTINS = frozenset({"open", "exec", "eval", "compile", "__import__", "setattr", "delattr", "getattr",
                                "globals", "locals", "vars", "dir", "breakpoint", "input", "help", "license", "credits",
                                "copyright", "type", "object", "memoryview", "classmethod", "staticmethod", "property",
                                "super", "__build_class__"})
FORBIDDEN_NAMES = FORBIDDEN_BUILTINS | {"__builtins__", "sys", "__loader__", "__spec__", "__file__", "__cached__",
                                        "__path__"}
# Attribute (and imported) names no kernel spells, each with what it reaches.
_ROUTES = {
    "a module through another module (files, processes, interpreter state)": (
        "sys", "os", "posix", "nt", "builtins", "subprocess", "io", "ctypes", "ctypeslib", "importlib", "inspect",
        "gc", "pickle", "marshal", "shutil", "pathlib", "socket", "signal", "threading", "multiprocessing", "modules",
        "types", "linecache", "tokenize", "traceback", "weakref", "tempfile", "codecs", "runpy", "posixpath",
        "ntpath", "genericpath"),
    "frames, code objects and class internals": (
        "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace", "gi_frame", "gi_code", "gi_yieldfrom",
        "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "tb_frame", "tb_next",
        "co_code", "co_consts", "co_names", "func_globals", "func_code", "func_closure", "cell_contents", "mro"),
    "a look-up by a string chosen at run time": (
        "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "get_annotations", "get_field", "vformat",
        "Formatter", "getattr_static", "import_module"),
    "copies attributes onto another object (monkeypatching)": ("update_wrapper", "wraps"),
}
FORBIDDEN_ATTRIBUTES = {name: why for why, names in _ROUTES.items() for name in names}
# File access (and native code) on any receiver but NKI's: kernels move data with NKI loads and stores.
FILE_NAMES = frozenset({"tofile", "dump", "fromfile", "save", "savez", "savez_compressed", "savetxt", "load",
                        "loadtxt", "genfromtxt", "memmap", "DataSource", "fromregex", "from_file", "testing", "f2py",
                        "distutils", "hub", "load_library", "load_inline", "cpp_extension"})
# Internals of libraries a kernel may import (attributes of the module, or names imported from it).
LIBRARY_INTERNALS = {"numpy": frozenset({"lib", "core", "compat", "rec", "source", "info", "lookfor"}),
                     "torch": frozenset({"utils", "ops", "library", "package", "jit", "classes", "serialization",
                                         "distributed", "compile"})}
NKI_ROOTS = frozenset({"nki", "neuronxcc"})
NKI_API = frozenset({"load"})  # FILE_NAMES that are NKI API on an NKI module (nl.load)
LIBRARIES = frozenset({"np", "numpy", "torch"})  # reached through another module: its checks are bypassed
# Arguments a model may try to pass to steer verification; the tools take the task from the user only.
IGNORED_ARGUMENTS = frozenset({"task", "reference", "tolerance", "atol", "rtol", "seeds", "seed", "inputs",
                               "task_path", "expected", "get_inputs"})
_DUNDER = re.compile(r"__\w+__")
_HARMLESS_DUNDERS = frozenset({"__main__"})


def _module_reason(name: str, task_stem: str | None) -> str | None:
    """Why importing the dotted module ``name`` is refused (None: allowed)."""
    parts = name.split(".")
    root = parts[0]
    if task_stem and root == task_stem:
        return f"imports the task module {name!r} (the reference is not the kernel's to change)"
    if root in FORBIDDEN_MODULES:
        return f"imports {name!r}, which a kernel never needs"
    if root.startswith("_") and root != "__future__":
        return f"imports the private module {name!r}"
    if root in sys.stdlib_module_names and root not in SAFE_STDLIB:
        return f"imports {name!r}, a standard-library module kernels do not use (allowed: {', '.join(sorted(SAFE_STDLIB))})"
    for part in parts[1:]:
        if (why := _name_reason(part, root)) is not None:
            return f"imports {name!r}: {why}"
    return None


def _name_reason(name: str, library: str | None) -> str | None:
    """Why an attribute (or a name imported from ``library``) called ``name`` is refused (None: allowed).
    ``library`` is the root module the name belongs to, when known (``numpy`` for ``np.core``)."""
    if name.startswith("_"):
        return f"touches the private attribute {name}"
    if name in FORBIDDEN_ATTRIBUTES:
        return f"uses .{name}: {FORBIDDEN_ATTRIBUTES[name]}"
    if name in FILE_NAMES and not (library in NKI_ROOTS and name in NKI_API):
        return f"uses .{name} (file access; kernels move data with NKI loads and stores)"
    if library in LIBRARY_INTERNALS and name in LIBRARY_INTERNALS[library]:
        return f"uses {library}.{name}, library internals a kernel never needs"
    return None


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _format_reason(call: ast.Call) -> str | None:
    """A ``str.format`` / ``format_map`` call whose template can look attributes or items up."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in ("format", "format_map"):
        return None
    template = func.value
    if isinstance(template, ast.Name) and template.id == "str" and call.args:
        template = call.args[0]
    if not (isinstance(template, ast.Constant) and isinstance(template.value, str)):
        return f"calls .{func.attr} on a template that is not a literal (format fields can look attributes up)"
    try:
        fields = _format_fields(template.value)
    except ValueError:
        return None  # str.format raises on it too
    for f in fields:
        if "." in f or "[" in f:
            return f"formats {{{f}}}, a field that looks attributes or items up"
    return None


def _format_fields(template: str, depth: int = 0) -> list[str]:
    """The field names of a format string, with those nested in format specs (``{0:{1.x}}``)."""
    out: list[str] = []
    for _, name, spec, _ in string.Formatter().parse(template):
        if name:
            out.append(name)
        if spec and depth < 2:
            out += _format_fields(spec, depth + 1)
    return out


class _Check:
    def __init__(self, tree: ast.Module, task_stem: str | None) -> None:
        self.tree, self.task_stem = tree, task_stem
        self.found: list[str] = []
        self.modules: dict[str, str] = {}  # names bound to modules by `import` -> their root module
        self.library: dict[str, str] = {}  # every imported name -> its root module
        self.receivers: set[int] = set()  # ids of Name nodes used as `name.attribute`
        self.inert: set[int] = set()  # ids of string constants that are bare statements (docstrings)

    def add(self, node: ast.AST, why: str) -> None:
        self.found.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    def run(self) -> list[str]:
        nodes = list(ast.walk(self.tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    root = a.name.split(".")[0]
                    self.modules[a.asname or root] = root
                    self.library[a.asname or root] = root
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.library[a.asname or a.name] = node.module.split(".")[0]
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                self.receivers.add(id(node.value))
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                self.inert.add(id(node.value))
        for node in nodes:
            self.visit(node)
        return self.found

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for a in node.names:
                if (why := _module_reason(a.name, self.task_stem)) is not None:
                    self.add(node, why)
        elif isinstance(node, ast.ImportFrom):
            self.import_from(node)
        elif isinstance(node, ast.Name):
            if node.id in FORBIDDEN_NAMES:
                self.add(node, f"uses {node.id}, which a kernel never needs")
            elif node.id in self.modules and id(node) not in self.receivers and isinstance(node.ctx, ast.Load):
                self.add(node, f"uses the module {node.id} as a value (write {node.id}.<name>: a module passed "
                               "around can be searched or patched)")
        elif isinstance(node, ast.Attribute):
            root = _root(node.value)
            library = self.library.get(root.id) if isinstance(root, ast.Name) else None
            if (why := _name_reason(node.attr, library)) is not None:
                self.add(node, why)
            elif library is not None and node.attr in LIBRARIES:
                self.add(node, f"uses .{node.attr} of another module (import the library itself)")
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                if (why := _name_reason(attr, None)) is not None:
                    self.add(node, f"matches a class pattern that {why}")
        elif isinstance(node, ast.Call):
            if (why := _format_reason(node)) is not None:
                self.add(node, why)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in self.inert:
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if any(m not in _HARMLESS_DUNDERS for m in _DUNDER.findall(text)) or text.startswith("__"):
                self.add(node, "spells a dunder name in a string")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            self.add(node, "declares globals (kernels keep state in tensors)")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = list(node.targets) if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                        self.add(node, f"assigns to the attribute .{sub.attr} (kernels write tensors, not objects)")

    def import_from(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.add(node, "relative import (the kernel must be self-contained)")
        module = node.module or ""
        if module and (why := _module_reason(module, self.task_stem)) is not None:
            self.add(node, why)
            return
        root = module.split(".")[0]
        for a in node.names:
            if a.name == "*":
                self.add(node, "star import (names must be explicit)")
            elif root != "__future__" and (why := _name_reason(a.name, root)) is not None:
                self.add(node, f"imports {a.name} from {module or '.'}: {why}")
            elif a.name in FORBIDDEN_NAMES:
                self.add(node, f"imports {a.name}, which a kernel never needs")


def violations(code: str, task_path: str | None = None) -> list[str]:
    """Reasons the candidate may not run (empty: fine). Unparsable code is fine here: the compiler
    reports the syntax error with its line."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    task_stem = os.path.splitext(os.path.basename(task_path))[0] if task_path else None
    return _Check(tree, task_stem).run()


def new_violations(candidate: str, original: str, task_path: str | None = None) -> list[str]:
    """Violations of the candidate that the user's own kernel does not already have (a user kernel
    that imports ``os`` keeps doing so; the agent may not add it)."""
    def reason(v: str) -> str:
        return v.split(": ", 1)[-1]

    allowed = [reason(v) for v in violations(original, task_path)]
    out = []
    for v in violations(candidate, task_path):
        if reason(v) in allowed:
            allowed.remove(reason(v))
        else:
            out.append(v)
    return out


# Top-level names of a task module: in a kernel file that is its own task they are the user's spec.
TASK_NAMES = frozenset({"get_inputs", "get_init_inputs", "reference", "Model", "TOLERANCE", "GRID", "LNC", "KERNEL",
                        "TARGET", "ALLOW_INPUT_MUTATION"})


def task_definitions(code: str) -> dict[str, str] | None:
    """``ast.dump`` of each top-level task definition (None when the code does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in TASK_NAMES:
            out[node.name] = ast.dump(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and t.id in TASK_NAMES:
                    out[t.id] = ast.dump(node)
    return out


def task_changes(candidate: str, original: str) -> list[str]:
    """Task definitions (reference, inputs, tolerance...) the candidate changed, added or removed."""
    before, after = task_definitions(original), task_definitions(candidate)
    if before is None or after is None:
        return []
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def ignored_arguments(arguments: dict[str, object]) -> list[str]:
    return sorted(k for k in arguments if k in IGNORED_ARGUMENTS)
