// aten_meta.h — owns calling the dispatcher's own C++ Meta kernel of an aten op that torch shadows with a
// Python meta kernel (torch/_meta_registrations.py), so shape propagation needs no Python reference code.
#pragma once

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace cdynamo::interp {

// Runs `op` (a torch._ops.OpOverload, borrowed) on `args` / `kwargs` (borrowed) with the C++ Meta kernel
// the dispatcher would run for it without torch's Python meta registration (ATen's C++ Meta kernel, else its
// CompositeExplicitAutograd(NonFunctional) kernel), when that Python registration is the active Meta kernel and
// every tensor argument is a meta tensor. Returns the result (new reference: a tensor,
// a tuple of them, ...) or NotImplemented (new reference) when this does not apply: then the caller dispatches
// as usual. A functional op whose kernel raises also gives NotImplemented (the usual dispatch raises the error
// it always raised); a mutating op's error is raised as the Python exception torch raises for it.
py::object call_aten_meta(py::handle op, py::handle args, py::handle kwargs);

// What call_aten_meta runs for `op` (an OpOverload, borrowed): 0 nothing (it returns NotImplemented), 1 ATen's
// C++ Meta kernel, 2 ATen's composite kernel, whose own aten calls dispatch again (the caller keeps its mode on).
int aten_meta_kind(py::handle op);

}  // namespace cdynamo::interp
