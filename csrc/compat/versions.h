// versions.h — owns the version stamps of dicts, instance dicts and types that say "unchanged since last seen".
#pragma once

#include <Python.h>

#include <cstdint>

namespace cdynamo::compat {

// A stamp of a dict's contents (borrowed `dict`, any dict or subclass): every insertion, replacement or deletion
// gives the dict a new stamp, and no two dict states, of any dicts alive now or ever, share one (a dict made at a
// freed dict's address gets a fresh stamp). 0: no stamp available (the caller must not memoize); on 3.13, every
// dict with split values (an object's materialized __dict__ shares its inline values, written without a stamp).
uint64_t dict_version(PyObject* dict);
// The instance __dict__ of `obj` (borrowed), materialized if the object keeps its attributes inline, when every
// attribute store of the object is then a store into that dict (so dict_version covers them); nullptr (no
// error left set) otherwise.
PyObject* versioned_instance_dict(PyObject* obj);
// A stamp of a type's own attributes and those of its bases: changes whenever any of them is set or deleted (and
// on __bases__ assignment), unique over all types; 0 when the type has none now (the caller must not memoize).
uint64_t type_version(PyTypeObject* type);

}  // namespace cdynamo::compat
