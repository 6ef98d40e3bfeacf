// shape_guard_spec.cpp — owns the typed reading of cdynamo._dynamic.GuardSpec in C++ (read_guard_spec).
#include "hook/shape_guard_spec.h"

#include <stdexcept>

namespace cdynamo::hook {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument("GuardSpec: " + what); }

// spec.name (a new reference held by the result); a missing attribute is reported by name.
py::object field(py::handle obj, const char* type, const char* name) {
  PyObject* v = PyObject_GetAttrString(obj.ptr(), name);  // new
  if (!v) {
    PyErr_Clear();
    bad(std::string(type) + " has no field '" + name + "'");
  }
  return py::reinterpret_steal<py::object>(v);
}

// An exact int field in [lo, hi].
int64_t int_field(py::handle obj, const char* type, const char* name, int64_t lo, int64_t hi) {
  py::object v = field(obj, type, name);
  if (!PyLong_CheckExact(v.ptr())) bad(std::string(type) + "." + name + " is not an int");
  int overflow = 0;
  long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow || n < lo || n > hi)
    bad(std::string(type) + "." + name + " = " + py::repr(v).cast<std::string>() + " is out of range");
  return n;
}

// A list field (a list exactly: the spec is made by _dynamic.TraceShapes.guard_spec).
py::list list_field(py::handle obj, const char* name) {
  py::object v = field(obj, "GuardSpec", name);
  if (!PyList_CheckExact(v.ptr())) bad(std::string(name) + " is not a list");
  return py::reinterpret_borrow<py::list>(v);
}

guards::ShapeSlot::Kind slot_kind(py::handle slot) {
  py::object k = field(slot, "SlotSpec", "kind");
  if (!PyUnicode_Check(k.ptr())) bad("SlotSpec.kind is not a str");
  std::string kind = k.cast<std::string>();
  using K = guards::ShapeSlot::Kind;
  if (kind == "size") return K::Size;
  if (kind == "stride") return K::Stride;
  if (kind == "offset") return K::StorageOffset;
  if (kind == "int") return K::Int;
  if (kind == "float") return K::Float;
  bad("SlotSpec.kind '" + kind + "' is not one of size, stride, offset, int, float");
}

std::vector<SlotSpec> read_slots(py::handle spec, size_t n_inputs) {
  std::vector<SlotSpec> out;
  for (py::handle s : list_field(spec, "slots")) {
    SlotSpec slot;
    slot.input = static_cast<size_t>(int_field(s, "SlotSpec", "input", 0, static_cast<int64_t>(n_inputs) - 1));
    slot.kind = slot_kind(s);
    slot.dim = static_cast<int>(int_field(s, "SlotSpec", "dim", 0, 63));
    out.push_back(slot);
  }
  return out;
}

// A bit mask field: an exact int in [0, 2**64).
uint64_t mask_field(py::handle obj, const char* name) {
  py::object v = field(obj, "InputMask", name);
  if (!PyLong_CheckExact(v.ptr())) bad(std::string("InputMask.") + name + " is not an int");
  unsigned long long n = PyLong_AsUnsignedLongLong(v.ptr());
  if (n == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    bad(std::string("InputMask.") + name + " = " + py::repr(v).cast<std::string>() + " is out of range");
  }
  return n;
}

std::vector<InputMask> read_masks(py::handle spec, size_t n_inputs) {
  py::list masks = list_field(spec, "masks");
  if (masks.size() != n_inputs)
    bad(std::to_string(masks.size()) + " masks for " + std::to_string(n_inputs) + " inputs (one per input)");
  std::vector<InputMask> out;
  for (py::handle m : masks) out.push_back(InputMask{mask_field(m, "sizes"), mask_field(m, "strides")});
  return out;
}

}  // namespace

ShapeGuardSpec read_guard_spec(py::handle spec, size_t n_inputs) {
  ShapeGuardSpec out;
  out.slots = read_slots(spec, n_inputs);
  out.programs = list_field(spec, "programs");
  out.fallback = field(spec, "GuardSpec", "fallback");
  if (!out.fallback.is_none() && !PyCallable_Check(out.fallback.ptr())) bad("fallback is neither None nor callable");
  for (py::handle tx : list_field(spec, "texts")) {
    if (!PyUnicode_Check(tx.ptr())) bad("texts holds a " + std::string(Py_TYPE(tx.ptr())->tp_name) + ", not a str");
    out.texts.push_back(tx.cast<std::string>());
  }
  out.masks = read_masks(spec, n_inputs);
  return out;
}

}  // namespace cdynamo::hook
