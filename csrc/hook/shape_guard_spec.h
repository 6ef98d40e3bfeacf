// shape_guard_spec.h — owns the typed reading of cdynamo._dynamic.GuardSpec (a dynamic-shape trace's guards) in C++.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "guards/shape_guard.h"

namespace cdynamo::hook {

namespace py = pybind11;

// cdynamo._dynamic.InputMask: the dimensions of one graph input whose sizes / strides TENSOR_MATCH leaves to the
// SHAPE_ENV guard (bit d: dimension d).
struct InputMask {
  uint64_t sizes = 0;
  uint64_t strides = 0;
};

// cdynamo._dynamic.SlotSpec: one number the SHAPE_ENV guard reads from the frame.
struct SlotSpec {
  size_t input = 0;  // index into the trace's graph inputs
  guards::ShapeSlot::Kind kind = guards::ShapeSlot::Kind::Size;
  int dim = 0;  // Size / Stride: the dimension; 0 otherwise
};

// cdynamo._dynamic.GuardSpec, typed.
struct ShapeGuardSpec {
  std::vector<SlotSpec> slots;
  py::object programs;             // a list of programs (guards::shape_guard checks each)
  py::object fallback;             // None or a callable over the slot values
  std::vector<std::string> texts;  // the guards as ShapeEnv prints them
  std::vector<InputMask> masks;    // one per graph input
};

// Reads `spec` (borrowed; a GuardSpec) by field name, for a trace with `n_inputs` graph inputs. Throws
// std::invalid_argument (ValueError) naming the field when one is missing or malformed: a slot kind outside
// SLOT_KINDS, an input index out of range, a mask count that is not one per input, a text that is not a str.
ShapeGuardSpec read_guard_spec(py::handle spec, size_t n_inputs);

}  // namespace cdynamo::hook
