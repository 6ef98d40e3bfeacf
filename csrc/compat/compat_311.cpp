// compat_311.cpp — CPython 3.11 implementation of compat.h (the only place internal headers are used).
// Compiled for every version; empty unless building for 3.11 (compat.h rejects unsupported versions).
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000

#define Py_BUILD_CORE 1
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "compat/compat.h"

namespace cdynamo::compat {

EvalFrameFn set_eval_frame(EvalFrameFn fn) {
  PyThreadState* tstate = PyThreadState_GET();
  _PyFrameEvalFunction prev = _PyInterpreterState_GetEvalFrameFunc(tstate->interp);
  _PyInterpreterState_SetEvalFrameFunc(tstate->interp,
                                        fn ? reinterpret_cast<_PyFrameEvalFunction>(fn) : &_PyEval_EvalFrameDefault);
  return prev == &_PyEval_EvalFrameDefault ? nullptr : reinterpret_cast<EvalFrameFn>(prev);
}

PyObject* eval_default(PyThreadState* tstate, Frame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

PyCodeObject* frame_code(Frame* f) { return f->f_code; }
PyObject* frame_globals(Frame* f) { return f->f_globals; }
PyObject* frame_builtins(Frame* f) { return f->f_builtins; }
PyObject* frame_function(Frame* f) { return reinterpret_cast<PyObject*>(f->f_func); }
PyObject* frame_locals_dict(Frame* f) { return f->f_locals; }
PyObject** frame_localsplus(Frame* f) { return f->localsplus; }

bool frame_has_object(Frame* f) { return f->frame_obj != nullptr; }

// 3.11: the caller of the eval-frame function (_PyEval_Vector) clears and pops the frame.
void release_unrun_frame(PyThreadState*, Frame*) {}

bool frame_started(Frame* f) {
  // A fresh frame points one code unit before the first instruction.
  return f->prev_instr != _PyCode_CODE(f->f_code) - 1;
}

PyCodeObject* caller_code(PyThreadState* tstate) {
  // The hook runs before _PyEval_EvalFrameDefault links the new frame in: the current frame is the caller's.
  _PyInterpreterFrame* f = tstate->cframe ? tstate->cframe->current_frame : nullptr;
  return f ? f->f_code : nullptr;
}

int recursion_headroom(PyThreadState* tstate) { return tstate->recursion_remaining; }

PyObject* type_dict_item(PyTypeObject* type, const char* name) {
  if (!type->tp_dict) return nullptr;
  PyObject* v = PyDict_GetItemString(type->tp_dict, name);  // borrowed; suppresses errors
  return v;
}

}  // namespace cdynamo::compat

#endif  // CPython 3.11
