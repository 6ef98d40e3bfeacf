# _core.py — owns loading the C++ extension cdynamo._C, with one clear error when it is not built.
import importlib

_error = None
_module = None


def C():
    """The cdynamo._C module; ImportError naming the fix when it is missing."""
    global _module, _error
    if _module is not None:
        return _module
    try:
        _module = importlib.import_module("cdynamo._C")
    except ImportError as e:
        _error = e
        raise ImportError(
            f"cdynamo's C++ extension cdynamo._C could not be imported ({e}). Build and install it with "
            "`bash scripts/setup.sh` (and do not import cdynamo from the source tree's python/ folder)."
        ) from e
    skip, keep = _skip_dirs()
    _module.set_skip_dirs(skip, keep)
    _module.set_nonrecursive_wrapper_codes(_nonrecursive_wrapper_codes())
    refresh_disable_codes()
    return _module


_disable_codes_set = False
_own_wrapper_codes = []  # cdynamo.disable(fn, recursive=False)'s wrapper code: eval_frame registers it at import


def register_nonrecursive_wrapper_code(code):
    """Called by eval_frame (which this module never imports: the import graph stays a DAG)."""
    if code not in _own_wrapper_codes:
        _own_wrapper_codes.append(code)


def no_capture(fn):
    """``fn`` wrapped so that it, and every frame it calls, runs without capture (cdynamo.disable's primitive, here
    for modules below eval_frame)."""
    C().skip_code(fn.__code__)
    return C().OptimizedCallable(fn, None)


def refresh_disable_codes():
    """Registers torch's disable wrapper once torch._dynamo is imported (without importing it ourselves: no
    function can have been wrapped before it is)."""
    global _disable_codes_set
    if _disable_codes_set or _module is None:
        return
    import sys
    if "torch._dynamo" not in sys.modules:
        return
    _disable_codes_set = True
    _module.set_disable_codes(_torch_disable_codes())
    _module.set_nonrecursive_wrapper_codes(_nonrecursive_wrapper_codes())


def _nonrecursive_wrapper_codes():
    """The code of cdynamo.disable(fn, recursive=False)'s wrapper and, once torch._dynamo is imported, of
    torch._dynamo.disable(fn, recursive=False)'s: the frame such a wrapper calls runs as Python."""
    import sys

    codes = list(_own_wrapper_codes)
    if "torch._dynamo" in sys.modules:
        try:
            from torch._dynamo import decorators

            code = getattr(decorators, "_nonrecursive_disable_wrapper_code", None)
            if code is not None:
                codes.append(code)
        except Exception:  # noqa: BLE001 - a torch without non-recursive disable: nothing to honour
            pass
    return codes


def _torch_disable_codes():
    """The code of the wrapper torch.compiler.disable / torch._dynamo.disable put around a function: its
    frames, and all they call, run without capture."""
    codes = []
    try:
        import torch._dynamo

        for make in (lambda f: torch._dynamo.disable(f), lambda f: torch.compiler.disable(f)):
            code = getattr(make(lambda: None), "__code__", None)
            if code is not None and code not in codes:
                codes.append(code)
    except Exception:  # noqa: BLE001 - a torch without these helpers: nothing to honour
        pass
    return codes


# Installed libraries whose frames are not captured (they are not PyTorch model code, or cannot be traced
# usefully); every other installed package is user code, wherever it is installed.
THIRD_PARTY_SKIP = ("_pytest", "pytest", "pluggy", "numpy", "scipy", "pandas", "sympy", "tqdm", "hypothesis",
                    "networkx", "IPython", "tensorflow", "jax")
# Directories of torch whose code is traced as user code.
TORCH_USER_DIRS = ("optim",)
# (pip and setuptools are not looked up: asking for their specs runs setuptools' distutils shim.)


def _package_dir(name):
    import importlib.util
    import os
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return spec.origin if spec.origin and os.path.isfile(spec.origin) else None


def _skip_dirs():
    """(skip, keep): paths whose frames are never captured (torch, the stdlib, cdynamo itself, the
    THIRD_PARTY_SKIP packages), and paths inside those that are user code again (site-packages, which
    pyenv, conda, python.org builds and Docker images put under the stdlib directory). The longest
    matching path decides."""
    import os
    import site
    import sysconfig

    import torch

    paths = sysconfig.get_paths()
    skip = [os.path.dirname(torch.__file__), paths["stdlib"], paths.get("platstdlib", paths["stdlib"]),
            os.path.dirname(__file__)]
    for name in THIRD_PARTY_SKIP:
        d = _package_dir(name)
        if d:
            skip.append(d)
    keep = [paths["purelib"], paths["platlib"]]
    # torch.optim is captured and inlined like user code, as torch._dynamo traces optimizer.step()
    # (its own graph breaks and torch._disable_dynamo helpers are honoured as in any user code).
    keep += [os.path.join(os.path.dirname(torch.__file__), d) for d in TORCH_USER_DIRS]
    try:
        keep += site.getsitepackages()
    except AttributeError:  # some virtualenv versions
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        keep.append(user)

    def both(dirs):
        # Both spellings: co_filename keeps the path the module was imported by, which may be a symlink.
        out = []
        for d in dirs:
            for p in (os.path.abspath(d), os.path.realpath(d)):
                if p not in out:
                    out.append(p)
        return out

    return both(skip), both(keep)


def available():
    try:
        C()
        return True
    except ImportError:
        return False
