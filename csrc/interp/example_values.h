// example_values.h — owns `ExampleValues`, the one choice between the two kinds of example value a trace propagates
// shapes on: meta tensors (a static trace) or fake tensors under a cdynamo._dynamic.TraceShapes (ShapeEnv + fake mode).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>

namespace cdynamo::interp {

namespace py = pybind11;

class ExampleValues {
 public:
  ExampleValues() = default;  // meta tensors
  // `shapes`: the trace's TraceShapes (fake tensors), or an empty object (meta tensors).
  explicit ExampleValues(py::object shapes) : shapes_(std::move(shapes)) {}

  // Fake tensors (symbolic sizes where dynamic) rather than meta ones.
  bool fake() const { return static_cast<bool>(shapes_); }
  // The TraceShapes of a fake trace (symbols of int / float inputs, unbacked scalars); empty for a meta one.
  const py::object& shapes() const { return shapes_; }

  // The example of tensor input `tensor` (borrowed), named `name` as its source is (L['x']): a fake tensor, or a meta
  // tensor of the same metadata. New reference.
  py::object of_input(py::handle tensor, const std::string& name) const;
  // The example of a tensor the graph holds as a constant (borrowed; assume_constant_result). New reference.
  py::object of_constant(py::handle tensor) const;
  // The `device=` a factory or a method is propagated with: meta, or the real device (fake tensors keep theirs).
  py::object device_arg(py::handle device) const;
  // Whether `.to(device)` moves the example (fake tensors) or is only recorded (meta tensors stay meta).
  bool moves_to_device() const { return fake(); }
  // Whether a propagation's result depends only on its inputs' static metadata, so that it may be memoized
  // (meta_cache.h): not for fake tensors, whose sizes are symbols of this trace's ShapeEnv.
  bool memoizable() const { return !fake(); }
  // Whether a tensor input's TENSOR_MATCH is added as it is wrapped (meta: all of its metadata is static); a fake
  // trace adds it after the trace, leaving out its symbolic sizes (hook/translate.cpp: add_shape_guards).
  bool guards_metadata_now() const { return !fake(); }
  // Whether a tensor result of propagation is a valid example (a meta trace must never get real data).
  bool valid_result(py::handle result) const;

  // fn(*args, **kwargs) on the examples: under the fake mode (factories with symbolic sizes make fake tensors too), or
  // under cdynamo._aten_meta's dispatch mode (ATen's C++ Meta kernels where torch shadows them with Python ones).
  // New reference; a Python error propagates (py::error_already_set).
  py::object run(py::handle fn, const py::tuple& args, const py::dict& kwargs) const;

 private:
  py::object shapes_;
};

}  // namespace cdynamo::interp
