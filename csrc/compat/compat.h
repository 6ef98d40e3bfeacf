// compat.h — owns the version-neutral view of CPython frames, the eval-frame hook slot and code creation.
#pragma once

#include <Python.h>

struct _PyInterpreterFrame;

namespace cdynamo::compat {

using Frame = struct _PyInterpreterFrame;
using EvalFrameFn = PyObject* (*)(PyThreadState*, Frame*, int);

// Installs `fn` as the interpreter's PEP 523 eval-frame function (nullptr: CPython's default) and returns
// the function that was installed before (nullptr if it was CPython's default).
EvalFrameFn set_eval_frame(EvalFrameFn fn);
// Runs `frame` with CPython's default evaluator. Returns a new reference or nullptr with an error set.
PyObject* eval_default(PyThreadState* tstate, Frame* frame, int throwflag);

// All accessors return borrowed references that live as long as the frame.
PyCodeObject* frame_code(Frame* f);
PyObject* frame_globals(Frame* f);
PyObject* frame_builtins(Frame* f);
PyObject* frame_function(Frame* f);  // the PyFunctionObject being run
PyObject* frame_locals_dict(Frame* f);  // non-NULL only for class bodies / exec frames
// Fast locals (co_nlocalsplus slots: locals, cells, frees); entries are borrowed and may be NULL.
PyObject** frame_localsplus(Frame* f);
// The code of the frame the thread is running while the hook is entered for a new frame: its caller (borrowed;
// nullptr at the top of the stack).
PyCodeObject* caller_code(PyThreadState* tstate);
// True once the frame has executed past its first instruction (resumed generators, re-entered frames).
bool frame_started(Frame* f);
// Python calls the thread can still make before RecursionError (the recursion limit minus the depth now).
int recursion_headroom(PyThreadState* tstate);

// Number of localsplus slots of a code object and the name of slot i (borrowed).
int code_nlocalsplus(PyCodeObject* code);
PyObject* code_localsplus_name(PyCodeObject* code, int i);
// Kind bits of slot i: CO_FAST_LOCAL / CO_FAST_CELL / CO_FAST_FREE (values of this Python).
int code_localsplus_kind(PyCodeObject* code, int i);
extern const int kFastLocal;
extern const int kFastCell;
extern const int kFastFree;
// A per-code-object data slot (co_extra): reserve an index (with the function that frees a value when its
// code object dies; -1 on failure), read it (nullptr when unset; no error left set) and write it (false on
// failure, no error left set).
int code_extra_index(void (*free_fn)(void*));
void* code_get_extra(PyCodeObject* code, int index);
bool code_set_extra(PyCodeObject* code, int index, void* value);
// Total number of argument slots (positional, keyword-only, *args, **kwargs).
int code_total_args(PyCodeObject* code);

}  // namespace cdynamo::compat
