// compat_312.cpp — CPython 3.12 implementation of compat.h (the only place internal headers are used).
// Compiled for every version; empty unless building for 3.12.
#include <Python.h>
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000

#define Py_BUILD_CORE 1
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

// 3.12's evaluator clears and pops the frame it ran itself.
PyObject* eval_default(PyThreadState* tstate, Frame* frame, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
}

PyCodeObject* frame_code(Frame* f) { return f->f_code; }
PyObject* frame_globals(Frame* f) { return f->f_globals; }
PyObject* frame_builtins(Frame* f) { return f->f_builtins; }
PyObject* frame_function(Frame* f) { return f->f_funcobj; }
PyObject* frame_locals_dict(Frame* f) { return f->f_locals; }
PyObject** frame_localsplus(Frame* f) { return f->localsplus; }
bool frame_has_object(Frame* f) { return f->frame_obj != nullptr; }

namespace {
// The thread's data stack gives back the frame's space (as _PyThreadState_PopFrame, not exported): a frame
// at the start of a chunk frees that chunk and returns to the previous one.
void pop_frame(PyThreadState* tstate, Frame* frame) {
  PyObject** base = reinterpret_cast<PyObject**>(frame);
  _PyStackChunk* chunk = tstate->datastack_chunk;
  if (base == &chunk->data[0]) {
    _PyStackChunk* previous = chunk->previous;  // the root chunk is never popped
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    tstate->datastack_limit = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(previous) + previous->size);
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
  } else {
    tstate->datastack_top = base;
  }
}
}  // namespace

void release_unrun_frame(PyThreadState* tstate, Frame* frame) {
  // What the evaluator's exit does for a thread-owned frame with no frame object: drop the strong
  // references of the slots (locals, cells, the empty stack), f_locals, the function and the code, then
  // pop the frame. Finalizers may run while the frame is still on the data stack, as in CPython.
  for (int i = 0; i < frame->stacktop; ++i) Py_XDECREF(frame->localsplus[i]);
  frame->stacktop = 0;
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  pop_frame(tstate, frame);
}

// main's compat.h declares this (merge): the code of the frame running while the hook is entered for a new
// frame, its caller (borrowed; nullptr at the top). 3.12's shim frames owned by the C stack are skipped.
PyCodeObject* caller_code(PyThreadState* tstate) {
  _PyInterpreterFrame* f = tstate->cframe ? tstate->cframe->current_frame : nullptr;
  while (f && f->owner == FRAME_OWNED_BY_CSTACK) f = f->previous;
  return f ? f->f_code : nullptr;
}

bool frame_started(Frame* f) {
  // A fresh frame points one code unit before the first instruction.
  return f->prev_instr != _PyCode_CODE(f->f_code) - 1;
}

// 3.12 counts Python frames and C recursion (calls through the C API, as each continuation is) apart; the
// smaller one decides.
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

#endif  // CPython 3.12
