# backends/_inductor_kernels.py — owns building the C++ kernels of one inductor output module in one compiler run
# (one shared library, one Python binding per kernel) instead of one compiler run per kernel.
"""Why: on CPU inductor builds every kernel of a graph as its own shared library, one g++ run each. Most of such a
run is fixed: loading torch's precompiled kernel header (a 150 MB .gch) and linking; on the 2-core VM an empty
source costs 0.45 s of the 0.6 s a Llama layer's kernel takes. A Llama-8 first call by region builds 8 kernels, so
more than half of its kernel CPU time is that fixed part, paid 8 times.

How: while ``_inductor_defer.deferred()`` is open and an output module is imported on that thread, each
``async_compile.cpp_pybinding(argtypes, source)`` the module makes (a kernel whose build inductor would submit to
its compile workers) is collected instead; when the module asks to wait for its kernels, the collected ones are
written into one C++ source, each kernel's code inside a namespace of its own with its entry function renamed
(``#define kernel cdk_kernel_<i>`` around it: the kernel's ``extern "C"`` symbols stay distinct), followed by one
binding per kernel that parses its arguments as inductor's binding does (pointers from tensors' data, int64 /
uintptr / float numbers). That source is built once, with the build options inductor would give each of these
kernels (its ISA flags, its precompiled header) and the same builder, submitted to inductor's compile workers, so it
overlaps what the main thread compiles next (inductor's code cache keys and locks it as it does its own
builds). Each kernel's future (inductor's own ``LambdaFuture``) gives that
kernel's binding once the library is loaded. Kernels are keyed by their source text and argument types: one already
built by an earlier module of the process is reused, not built again (inductor's code cache does the same per
kernel).

Only plain kernels are collected: argument types of the four kinds above; preprocessor lines only the kernel
header's include (hoisted to the top, once) and ``#pragma`` lines; no ``cdk_`` names. Anything else, and any kernel
while inductor compiles in the calling thread (``compile_threads`` 1), takes inductor's own path. A merged build
that fails builds each of its kernels inductor's way when it is waited for (a slower first call, never a different
kernel). ``config.merge_cpp_kernels`` (default True) switches this off.
"""
import functools
import hashlib
import os
import re
import sys
import threading

_lock = threading.Lock()
_built = {}  # (argtypes, source) -> (batch, index): kernels of this process by source

_HEADER = "#include <torch/csrc/inductor/cpp_prefix.h>"
_NUMBERS = {"int64_t": "cdk_long", "uintptr_t": "cdk_uintptr", "float": "cdk_float"}
_PREPROCESSOR = re.compile(r"^\s*#")


def _arg(argtype):
    """The binding's parser for one argument type (None: not one this binding handles)."""
    t = argtype.replace("const ", "").strip()
    if t.endswith("*"):
        return f"cdk_ptr<{t}>"
    return _NUMBERS.get(t)


def eligible(argtypes, source):
    if "cdk_" in source or not all(_arg(a) for a in argtypes):
        return False
    for line in source.splitlines():
        if not _PREPROCESSOR.match(line):
            continue
        text = line.strip()
        if text != _HEADER and (not text.startswith("#pragma") or text.startswith("#pragma once")):
            return False
    return True


_BINDING_HEAD = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdexcept>
#include <type_traits>

static void* (*cdk_data_ptr)(PyObject*) = nullptr;

template <typename T> static inline T cdk_ptr(PyObject* args, Py_ssize_t n) {
    static_assert(std::is_pointer_v<T>, "a pointer argument");
    return static_cast<T>(cdk_data_ptr(PyTuple_GET_ITEM(args, n)));
}
static inline int64_t cdk_long(PyObject* args, Py_ssize_t n) {
    Py_ssize_t v = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, n));
    if (v == -1 && PyErr_Occurred()) throw std::runtime_error("expected an int argument");
    return static_cast<int64_t>(v);
}
static inline uintptr_t cdk_uintptr(PyObject* args, Py_ssize_t n) {
    void* v = PyLong_AsVoidPtr(PyTuple_GET_ITEM(args, n));
    if (v == reinterpret_cast<void*>(-1) && PyErr_Occurred()) throw std::runtime_error("expected an int argument");
    return reinterpret_cast<uintptr_t>(v);
}
static inline float cdk_float(PyObject* args, Py_ssize_t n) {
    double v = PyFloat_AsDouble(PyTuple_GET_ITEM(args, n));
    if (v == -1.0 && PyErr_Occurred()) throw std::runtime_error("expected a float argument");
    return static_cast<float>(v);
}
static PyObject* cdk_fail(const char* what) {
    PyErr_SetString(PyExc_RuntimeError, what);
    return nullptr;
}
"""

_BINDING_ONE = r"""
static PyObject* cdk_py_{i}(PyObject*, PyObject* args) {{
    try {{
        if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != {n}) return cdk_fail("kernel {i}: {n} args");
        cdk_ns_{i}::cdk_kernel_{i}({parse});
        Py_RETURN_NONE;
    }} catch (std::exception const& e) {{
        return cdk_fail(e.what());
    }} catch (...) {{
        return cdk_fail("unhandled error");
    }}
}}
"""

_BINDING_TAIL = r"""
static PyObject* cdk_set_data_ptr(PyObject*, PyObject* arg) {{
    void* p = PyLong_AsVoidPtr(arg);
    if (p == nullptr && PyErr_Occurred()) return nullptr;
    cdk_data_ptr = reinterpret_cast<void* (*)(PyObject*)>(p);
    Py_RETURN_NONE;
}}

static PyMethodDef cdk_methods[] = {{
    {{"set_data_ptr", cdk_set_data_ptr, METH_O, ""}},
{methods}
    {{nullptr, nullptr, 0, nullptr}}}};

static struct PyModuleDef cdk_module = {{PyModuleDef_HEAD_INIT, "{name}", nullptr, -1, cdk_methods}};

PyMODINIT_FUNC PyInit_{name}(void) {{
    PyObject* m = PyModule_Create(&cdk_module);
#ifdef Py_GIL_DISABLED
    if (m != nullptr) PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED);
#endif
    return m;
}}
"""


def merged_source(kernels, name):
    """One C++ source with every (argtypes, source) kernel and its binding ``k<i>`` in module ``name``."""
    parts = [_HEADER]
    for i, (_, source) in enumerate(kernels):
        body = "\n".join(line for line in source.splitlines() if line.strip() != _HEADER)
        parts.append(f"namespace cdk_ns_{i} {{\n#define kernel cdk_kernel_{i}\n{body}\n#undef kernel\n}}")
    parts.append(_BINDING_HEAD)
    methods = []
    for i, (argtypes, _) in enumerate(kernels):
        parse = ", ".join(f"{_arg(a)}(args, {n})" for n, a in enumerate(argtypes))
        parts.append(_BINDING_ONE.format(i=i, n=len(argtypes), parse=parse))
        methods.append(f'    {{"k{i}", cdk_py_{i}, METH_VARARGS, ""}},')
    parts.append(_BINDING_TAIL.format(methods="\n".join(methods), name=name))
    return "\n".join(parts)


def _build_option(needs_vec_isa):
    """(inductor's build option for a kernel with python bindings, its hashable command line), as
    ``CppCodeCache.load_async`` makes them for such a kernel (no separate optimized code)."""
    from torch._inductor import config
    from torch._inductor.codecache import CppPythonBindingsCodeCache, _precompile_header
    from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions
    from torch._inductor.cpu_vec_isa import invalid_vec_isa, pick_vec_isa

    command = {**CppPythonBindingsCodeCache.cpp_compile_command_flags, "device_type": "cpu", "extra_flags": (),
               "use_relative_path": config.is_fbcode(),
               "vec_isa": pick_vec_isa() if needs_vec_isa else invalid_vec_isa}
    option = CppTorchDeviceOptions(compile_only=False, min_optimize=False, **command)
    line = CppBuilder(name="o", sources="i", BuildOption=option).get_command_line()
    if config.cpp_cache_precompile_headers and sys.platform != "win32":
        header = CppPythonBindingsCodeCache._get_uncompiled_header("cpu")
        if header:
            option.precompiled_header = _precompile_header(header, line, min_optimize=False, **command)
    return option, line


class Batch:
    """The kernels of one output module that share a build option; built together by ``submit``."""

    def __init__(self, needs_vec_isa):
        self.needs_vec_isa = needs_vec_isa
        self.kernels = []
        self._future = None
        self._job = None
        self._module = None
        self._fallback = {}
        self._load_lock = threading.Lock()

    def add(self, argtypes, source):
        from torch._inductor.codecache import LambdaFuture

        self.kernels.append((tuple(argtypes), source))
        return LambdaFuture(functools.partial(self.kernel, len(self.kernels) - 1))

    def submit(self, submit_fn):
        """Starts the build (``submit_fn``: inductor's compile workers)."""
        from torch._inductor.codecache import _worker_compile_cpp, get_lock_dir, write
        from torch._inductor.cpp_builder import CppBuilder

        option, line = _build_option(self.needs_vec_isa)
        digest = hashlib.sha256(repr((self.kernels, line)).encode()).hexdigest()[:24]
        self.name = f"cdk_{digest}"
        key, path = write(merged_source(self.kernels, self.name), "cpp", extra=line)
        builder = CppBuilder(name=os.path.splitext(os.path.basename(path))[0], sources=path, BuildOption=option,
                             output_dir=os.path.dirname(path))
        self.binary = builder.get_target_file_path()
        self._job = functools.partial(_worker_compile_cpp, os.path.join(get_lock_dir(), key + ".lock"), (builder,))
        from .. import utils

        stats = utils.counters["stats"]
        stats["merged_kernel_libraries"] += 1
        stats["merged_kernels"] += len(self.kernels)
        if not os.path.exists(self.binary):  # built by an earlier process on this cache dir: loaded as it is
            self._future = submit_fn(self._job)

    def _load(self):
        with self._load_lock:
            return self._load_locked()

    def _load_locked(self):
        import importlib.util

        import torch

        if self._module is None:
            if self._job is None:
                raise RuntimeError("merged kernel build not started")
            if hasattr(self._future, "result"):
                self._future.result()
            self._job()  # returns at once when the library is there (the lock is taken as inductor takes it)
            spec = importlib.util.spec_from_file_location(self.name, self.binary)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.set_data_ptr(torch._C._dynamo.guards._torchinductor_pyobject_tensor_data_ptr)
            self._module = module
        return self._module

    def kernel(self, i):
        """Kernel ``i``'s callable: its binding in the merged library, or inductor's own build of it when the
        merged build failed."""
        if i in self._fallback:
            return self._fallback[i]
        try:
            return getattr(self._load(), f"k{i}")
        except Exception:  # noqa: BLE001  (inductor builds this kernel alone and reports its own errors)
            from torch._inductor.codecache import CppPythonBindingsCodeCache

            from .. import utils

            utils.counters["stats"]["merged_kernel_fallbacks"] += 1
            argtypes, source = self.kernels[i]
            fn = self._fallback[i] = CppPythonBindingsCodeCache.load_pybinding(list(argtypes), source)
            return fn


_available = None


def available():
    """True if this torch's inductor has every private helper the merged build uses (torch 2.13 has; torch 2.11's
    codecache lacks ``_resolve_needs_vec_isa``): otherwise kernels take inductor's own path."""
    global _available
    if _available is None:
        try:
            from torch._inductor.codecache import (CppPythonBindingsCodeCache, LambdaFuture, _precompile_header,  # noqa: F401
                                                   _resolve_needs_vec_isa, _worker_compile_cpp, get_lock_dir, write)
            from torch._inductor.cpp_builder import CppBuilder, CppTorchDeviceOptions  # noqa: F401
            from torch._inductor.cpu_vec_isa import invalid_vec_isa, pick_vec_isa  # noqa: F401
            _available = True
        except (ImportError, AttributeError):
            _available = False
    return _available


class Collector:
    """The kernels one output module asks for while it is imported, in batches by build option."""

    def __init__(self):
        self.batches = {}

    def add(self, argtypes, source):
        """A future of the kernel's callable, or None when it is not collected (inductor's path)."""
        from torch._inductor.codecache import LambdaFuture, _resolve_needs_vec_isa

        key = (tuple(argtypes), source)
        with _lock:
            known = _built.get(key)
        if known is not None:
            batch, i = known
            return LambdaFuture(functools.partial(batch.kernel, i))
        if not eligible(argtypes, source):
            return None
        needs = bool(_resolve_needs_vec_isa("cpu", source, None))
        batch = self.batches.get(needs)
        if batch is None:
            batch = self.batches[needs] = Batch(needs)
        future = batch.add(argtypes, source)
        with _lock:
            _built[key] = (batch, len(batch.kernels) - 1)
        return future

    def submit(self, submit_fn):
        """Starts the builds; a batch whose build cannot start has its kernels built inductor's way when waited
        for (``Batch.kernel``)."""
        for batch in self.batches.values():
            try:
                batch.submit(submit_fn)
            except Exception:  # noqa: BLE001
                batch._job = None
        self.batches = {}
