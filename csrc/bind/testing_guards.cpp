// testing_guards.cpp — owns cdynamo._C._testing.GuardSet: guards built and checked against plain Python values
// (a list standing in for a frame's locals), without tracing a frame.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "guards/guard.h"
#include "guards/shape_guard.h"

namespace py = pybind11;
using namespace cdynamo;

namespace {

// A GuardSet over a pretend frame whose locals are `names` (slot i holds names[i]).
struct TestGuards {
  std::vector<std::string> names;
  guards::GuardSet set;

  // "x" (a local), ("global", "g"), ("attr", <source>, "name"), ("item", <source>, i).
  guards::SourcePtr source(py::handle spec) const {
    if (py::isinstance<py::str>(spec)) {
      std::string name = spec.cast<std::string>();
      for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return guards::Source::local(static_cast<int>(i), name);
      throw py::value_error("no local named '" + name + "'");
    }
    py::tuple t = spec.cast<py::tuple>();
    std::string kind = t.size() ? t[0].cast<std::string>() : "";
    if (kind == "global" && t.size() == 2) return guards::Source::global(t[1].cast<std::string>());
    if (kind == "attr" && t.size() == 3) return guards::Source::attr(source(t[1]), t[2].cast<std::string>());
    if (kind == "item" && t.size() == 3) return guards::Source::item(source(t[1]), t[2].cast<int>());
    throw py::value_error("bad source spec " + py::repr(spec).cast<std::string>());
  }
};

guards::ShapeSlot::Kind slot_kind(const std::string& k) {
  if (k == "size") return guards::ShapeSlot::Kind::Size;
  if (k == "stride") return guards::ShapeSlot::Kind::Stride;
  if (k == "storage_offset") return guards::ShapeSlot::Kind::StorageOffset;
  if (k == "int") return guards::ShapeSlot::Kind::Int;
  if (k == "float") return guards::ShapeSlot::Kind::Float;
  throw py::value_error("slot kind must be size, stride, storage_offset, int or float, not '" + k + "'");
}

}  // namespace

void bind_testing_guards(py::module_& m) {
  py::class_<TestGuards>(m, "GuardSet", "Guards over a pretend frame whose locals are `names` (tests only).")
      .def(py::init([](std::vector<std::string> names) {
             auto g = std::make_unique<TestGuards>();
             g->names = std::move(names);
             return g;
           }),
           py::arg("names"))
      .def(
          "add_tensor_match",
          [](TestGuards& g, py::handle src, py::handle example, uint64_t dynamic_sizes, uint64_t dynamic_strides) {
            if (!guards::is_tensor(example.ptr())) throw py::type_error("add_tensor_match needs a tensor");
            g.set.add(guards::tensor_match(g.source(src), example.ptr(), dynamic_sizes, dynamic_strides));  // borrowed example
          },
          py::arg("source"), py::arg("example"), py::arg("dynamic_sizes") = 0, py::arg("dynamic_strides") = 0)
      .def(
          "add_shape_env",
          [](TestGuards& g, py::list slots, py::object exprs, py::object fallback, std::vector<std::string> texts) {
            std::vector<guards::ShapeSlot> ss;
            for (py::handle s : slots) {
              py::tuple t = s.cast<py::tuple>();  // (source spec, kind, dim)
              if (t.size() != 3) throw py::value_error("a slot is (source, kind, dim)");
              guards::ShapeSlot slot;
              slot.source = g.source(t[0]);
              slot.kind = slot_kind(t[1].cast<std::string>());
              slot.dim = t[2].cast<int>();
              ss.push_back(std::move(slot));
            }
            // exprs / fallback: borrowed for the call; the guard keeps what it needs.
            g.set.add(guards::shape_guard(std::move(ss), exprs.ptr(), fallback.ptr(), std::move(texts)));
          },
          py::arg("slots"), py::arg("exprs"), py::arg("fallback") = py::none(), py::arg("texts"))
      .def(
          "check",
          [](const TestGuards& g, py::list values, py::object globals) {
            if (values.size() != g.names.size()) throw py::value_error("one value per local name");
            std::vector<PyObject*> slots;
            for (py::handle v : values) slots.push_back(v.ptr());  // borrowed from `values`, alive for the call
            py::dict glob = globals.is_none() ? py::dict() : globals.cast<py::dict>();
            guards::FrameView fv;
            fv.localsplus = slots.data();
            fv.globals = glob.ptr();        // borrowed
            fv.builtins = PyEval_GetBuiltins();  // borrowed
            std::string why;
            bool ok = g.set.check(fv, &why);
            bool ok_fast = g.set.check(fv);  // the no-reason path must agree
            if (ok != ok_fast) throw std::runtime_error("GuardSet::check verdicts differ with and without a reason");
            return py::make_tuple(ok, why);
          },
          py::arg("values"), py::arg("globals") = py::none(),
          "(passed, failure reason) for `values` as the locals; checks twice (with and without a reason).")
      .def(
          "add_type_match",
          [](TestGuards& g, py::handle src, py::handle example) {
            g.set.add(guards::type_match(g.source(src), example.ptr()));  // borrowed example
          },
          py::arg("source"), py::arg("example"))
      .def("tree", [](const TestGuards& g) { return g.set.tree_text(); }, "The guard tree's printout.")
      .def("describe", [](const TestGuards& g) { return g.set.describe(); })
      .def("__len__", [](const TestGuards& g) { return g.set.size(); });
}
