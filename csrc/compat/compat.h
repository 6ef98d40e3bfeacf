// compat.h — owns the version-neutral view of CPython frames, the eval-frame hook slot and code creation.
#pragma once

#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "cdynamo compat: CPython 3.11, 3.12 and 3.13 are supported; add compat_3XX.cpp for this version"
#endif

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
// True if a frame object (sys._getframe, tracebacks) refers to the frame.
bool frame_has_object(Frame* f);
// The eval-frame function ran the frame's work elsewhere (cached code called with its arguments) and did
// not hand `frame` to eval_default: releases what the evaluator would have (3.12+ clears the frame's
// references and pops it from the thread's data stack; 3.11 leaves that to the caller). Only for a frame
// owned by the thread with no frame object (frame_has_object false); `frame` is invalid afterwards.
void release_unrun_frame(PyThreadState* tstate, Frame* frame);
// True once the frame has executed past its first instruction (resumed generators, re-entered frames).
bool frame_started(Frame* f);
// Python calls the thread can still make before RecursionError (the recursion limit minus the depth now).
int recursion_headroom(PyThreadState* tstate);

// The entry `name` of a type's own __dict__ (borrowed: the type keeps it alive), or nullptr with no error
// set. 3.12 keeps the dict of static builtin types (object, dict, ...) outside tp_dict.
PyObject* type_dict_item(PyTypeObject* type, const char* name);

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

// A weak reference's object as a new reference, or nullptr (no error set) once it is dead (3.13 deprecates
// the borrowed PyWeakref_GetObject).
PyObject* weakref_get(PyObject* ref);
// True once a weak reference's object is gone.
bool weakref_dead(PyObject* ref);

}  // namespace cdynamo::compat
