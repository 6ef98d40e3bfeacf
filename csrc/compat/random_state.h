// random_state.h — owns copying the Mersenne Twister state of a random.Random (CPython's _random.Random object
// layout, a private detail of Modules/_randommodule.c) in and out of a bytes object without building getstate()'s
// 625-int tuple.
#pragma once

#include <Python.h>

namespace cdynamo::compat {

// A NEW bytes object holding the generator state of `gen` (borrowed: an instance of _random.Random or a subclass),
// or nullptr with NO error set when the layout is not the one known here (the caller then uses getstate()).
PyObject* random_state_save(PyObject* gen);
// Writes back a state random_state_save made for a generator of the same layout; false (no error set) when `gen` or
// `blob` (both borrowed) does not fit.
bool random_state_restore(PyObject* gen, PyObject* blob);

}  // namespace cdynamo::compat
