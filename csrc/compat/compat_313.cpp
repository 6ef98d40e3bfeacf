// compat_313.cpp — CPython 3.13 implementation of compat.h (the only place internal headers are used).
// Compiled for every version; empty unless building for 3.13.
#include <Python.h>
#if PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000

#define Py_BUILD_CORE 1
#include <internal/pycore_ceval.h>
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "compat/compat.h"

#include <algorithm>

namespace cdynamo::compat {

EvalFrameFn set_eval_frame(EvalFrameFn fn) {
  PyThreadState* tstate = PyThreadState_GET();
  _PyFrameEvalFunction prev = _PyInterpreterState_GetEvalFrameFunc(tstate->interp);
  _PyInterpreterState_SetEvalFrameFunc(tstate->interp,
                                        fn ? reinterpret_cast<_PyFrameEvalFunction>(fn) : &_PyEval_EvalFrameDefault);
  return prev == &_PyEval_EvalFrameDefault ? nullptr : reinterpret_cast<EvalFrameFn>(prev);
}

// As on 3.12, the evaluator clears and pops the frame it ran itself.
PyObject* eval_default(PyThreadState* tstate, Frame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

// 3.13 keeps the code object in f_executable (a strong reference; None for C-stack entry frames).
PyCodeObject* frame_code(Frame* f) { return _PyFrame_GetCode(f); }
PyObject* frame_globals(Frame* f) { return f->f_globals; }
PyObject* frame_builtins(Frame* f) { return f->f_builtins; }
PyObject* frame_function(Frame* f) { return f->f_funcobj; }
PyObject* frame_locals_dict(Frame* f) { return f->f_locals; }
PyObject** frame_localsplus(Frame* f) { return f->localsplus; }
bool frame_has_object(Frame* f) { return f->frame_obj != nullptr; }

void release_unrun_frame(PyThreadState* tstate, Frame* frame) {
  // 3.13 exports what the evaluator's exit does: for a thread-owned frame, drop the slots' strong
  // references (locals, cells, the empty stack), f_locals, the function and f_executable, then pop the
  // frame from the thread's data stack. Finalizers may run while the frame is still on the stack, as in
  // CPython.
  _PyEval_FrameClearAndPop(tstate, frame);
}

// The code of the frame running while the hook is entered for a new frame: its caller (borrowed; nullptr
// at the top). The hook runs before the evaluator links the new frame in; C-stack entry frames (whose
// f_executable is None) are skipped.
PyCodeObject* caller_code(PyThreadState* tstate) {
  _PyInterpreterFrame* f = tstate->current_frame;
  while (f && (f->owner == FRAME_OWNED_BY_CSTACK || !PyCode_Check(f->f_executable))) f = f->previous;
  return f ? _PyFrame_GetCode(f) : nullptr;
}

bool frame_started(Frame* f) {
  // 3.13: a fresh frame's instr_ptr is the first code unit (3.11/3.12 pointed one before it).
  return f->instr_ptr != _PyCode_CODE(_PyFrame_GetCode(f));
}

// Python frames and C recursion are counted apart; the smaller one decides.
int recursion_headroom(PyThreadState* tstate) {
  return std::min(tstate->py_recursion_remaining, tstate->c_recursion_remaining);
}

PyObject* type_dict_item(PyTypeObject* type, const char* name) {
  PyObject* dict = PyType_GetDict(type);  // new reference (static builtin types keep theirs per interpreter)
  if (!dict) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* v = PyDict_GetItemString(dict, name);  // borrowed, owned by the type's dict; suppresses errors
  Py_DECREF(dict);  // the type still holds it
  return v;
}

}  // namespace cdynamo::compat

#endif  // CPython 3.13
