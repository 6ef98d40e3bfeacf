// example_values.cpp — ExampleValues: meta or fake examples, one choice (see example_values.h).
#include "interp/example_values.h"

#include "guards/tensor_match.h"
#include "interp/services.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

py::object ExampleValues::of_input(py::handle tensor, const std::string& name) const {
  if (fake()) return shapes_.attr("fake")(tensor, name);  // dimensions symbolic where dynamic
  PyObject* meta = guards::make_meta(tensor.ptr());        // new reference
  if (!meta) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(meta);
}

py::object ExampleValues::of_constant(py::handle tensor) const {
  if (fake()) return shapes_.attr("fake_mode").attr("from_tensor")(tensor);
  return tensor.attr("to")(PyRefs::get().meta_device);
}

py::object ExampleValues::device_arg(py::handle device) const {
  return fake() ? py::reinterpret_borrow<py::object>(device) : PyRefs::get().meta_device;
}

bool ExampleValues::valid_result(py::handle result) const {
  return fake() || !guards::is_tensor(result.ptr()) || guards::is_meta_tensor(result.ptr());
}

py::object ExampleValues::run(py::handle fn, const py::tuple& args, const py::dict& kwargs) const {
  if (!fake()) return services().aten_meta_run()(fn, args, kwargs);
  // Under the trace's fake mode; left however the op ends (an error of leaving it is dropped: the op's own, if any,
  // is the one that propagates).
  struct Mode {
    py::handle shapes;
    explicit Mode(py::handle s) : shapes(s) { shapes.attr("enter")(); }
    ~Mode() {
      try {
        shapes.attr("exit")();
      } catch (py::error_already_set&) {
      }
    }
  } mode(shapes_);
  return fn(*args, **kwargs);
}

}  // namespace cdynamo::interp
