# vision_shim.py — owns making `import torchvision` work when its C++ extension cannot load with the installed torch (timm needs torchvision's Python part only).
"""Import this before anything imports torchvision (timm does; transformers may).

torchvision's only PyPI wheel for torch 2.13 (0.28.0) is a CUDA build: its ``_C.so`` does not load with the
CPU torch. torchvision swallows that (``torchvision.extension._has_ops()`` is False), but then
``torchvision/_meta_registrations.py`` calls ``torch.library.register_fake("torchvision::nms")`` and
``("torchvision::qnms")`` at import time, which raise ``RuntimeError: operator torchvision::nms does not
exist``, so ``import torchvision`` (and ``import timm``, which imports ``torchvision.ops.misc``) fails.

Here, before torchvision is imported, its ``_C`` is loaded the way ``torchvision/extension.py`` loads it
(``torch.ops.load_library``; loading it again there is a no-op). Only when that fails are the two op schemas
defined, with no kernel: the Python part then imports, and calling ``torchvision.ops.nms`` still raises
torchvision's own "Couldn't load custom C++ ops" error. No model in the zoos calls them. With a working
torchvision, without torchvision, or when torchvision is already imported, this does nothing.
"""
import importlib.machinery
import importlib.util
import sys

import torch
import torch.library

SHIMMED = False  # True when the schemas below were defined (torchvision's _C did not load)
LOAD_ERROR = None  # why loading torchvision's _C failed here (repr), for the report
_lib = None  # the Library that owns the schemas; it must stay alive for them to stay registered


def _extension_path(spec):
    for d in spec.submodule_search_locations or ():
        finder = importlib.machinery.FileFinder(
            d, (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES))
        ext = finder.find_spec("_C")
        if ext is not None:
            return ext.origin
    return None


def _has_op(name):
    try:
        return hasattr(torch.ops.torchvision, name)
    except Exception:  # noqa: BLE001
        return False


def _install():
    global SHIMMED, _lib, LOAD_ERROR
    if "torchvision" in sys.modules:
        return
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return
    if spec is None:
        return  # torchvision not installed: nothing to fix
    path = _extension_path(spec)
    if path is not None:
        try:
            torch.ops.load_library(path)
        except Exception as e:  # noqa: BLE001 - any failure: torchvision's own import swallows it too
            LOAD_ERROR = repr(e)
        else:
            return  # it loaded: torchvision's own ops (its import registers nms's fake kernel itself)
    missing = [n for n in ("nms", "qnms") if not _has_op(n)]
    if not missing:
        return
    _lib = torch.library.Library("torchvision", "DEF")
    schemas = {"nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
               "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"}
    for n in missing:
        _lib.define(schemas[n])
    SHIMMED = True


_install()
