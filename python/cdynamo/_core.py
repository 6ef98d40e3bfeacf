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
    _module.set_skip_dirs(_skip_dirs())
    return _module


def _skip_dirs():
    """Directories whose frames are never captured: torch, the stdlib, cdynamo itself and pytest."""
    import importlib.util
    import os
    import sysconfig

    import torch

    dirs = [os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"], os.path.dirname(__file__)]
    spec = importlib.util.find_spec("_pytest")
    if spec is not None and spec.origin:
        dirs.append(os.path.dirname(spec.origin))
    # Both spellings: co_filename keeps the path the module was imported by, which may be a symlink.
    out = []
    for d in dirs:
        for p in (os.path.abspath(d), os.path.realpath(d)):
            if p not in out:
                out.append(p)
    return out


def available():
    try:
        C()
        return True
    except ImportError:
        return False
