// ops_functions.cpp — owns functions made during the trace: LOAD_CLOSURE, MAKE_FUNCTION (lambdas, nested
// functions, comprehensions; 3.13: SET_FUNCTION_ATTRIBUTE) and cell variables (STORE_DEREF): plain locals
// until captured, then Cells.
#include "bytecode/bytecode.h"
#include "compat/compat.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

}  // namespace

struct Tracer::FunctionOps {
  static void load_closure(Tracer& t, const Instruction& i) { push_closure_cell(t, i.arg); }

  // A function attribute set by MAKE_FUNCTION's flags (3.11, 3.12) or SET_FUNCTION_ATTRIBUTE (3.13): 0x01
  // defaults, 0x02 keyword-only defaults, 0x04 annotations (not used by calls), 0x08 the closure.
  static void set_function_attribute(Tracer& t, const ValuePtr& f, int flag, const ValuePtr& value) {
    if (flag == 0x01) {
      if (!value->is_constant_like()) t.unsupported("function defaults that are not constants");
      if (PyFunction_SetDefaults(f->obj.ptr(), value->as_python().ptr()) < 0) throw py::error_already_set();
    } else if (flag == 0x02) {
      if (value->kind != VKind::Dict) t.unsupported("keyword-only defaults of " + value->describe());
      for (const auto& v : value->items)
        if (!v->is_constant_like()) t.unsupported("keyword-only defaults that are not constants");
      if (PyFunction_SetKwDefaults(f->obj.ptr(), value->as_python().ptr()) < 0) throw py::error_already_set();
    } else if (flag == 0x08) {
      if (value->kind != VKind::Tuple) t.unsupported("closure of " + value->describe());
      for (const auto& c : value->items)
        if (c->kind != VKind::Cell) t.unsupported("closure item " + c->describe() + " is not a cell");
      std::vector<ValuePtr>& cells = f->function().closure;
      cells.clear();
      for (const auto& c : value->items) cells.push_back(c);
    } else if (flag != 0x04) {
      t.unsupported("function attribute " + std::to_string(flag));
    }
  }

  static void make_function(Tracer& t, const Instruction& i) {
    ValuePtr code_v = t.pop();
    ValuePtr closure = (i.arg & 0x08) ? t.pop() : nullptr;
    if (i.arg & 0x04) t.pop();  // annotations: not used by calls
    ValuePtr kwdefaults = (i.arg & 0x02) ? t.pop() : nullptr;
    ValuePtr defaults = (i.arg & 0x01) ? t.pop() : nullptr;
    if (code_v->kind != VKind::Object || !PyCode_Check(code_v->obj.ptr())) t.unsupported("MAKE_FUNCTION without code");
    py::object fn = py::reinterpret_steal<py::object>(PyFunction_New(code_v->obj.ptr(), t.fv.globals));  // new
    if (!fn) throw py::error_already_set();
    ValuePtr f = Value::object(fn);
    f->payload = FunctionOf{};  // made_in_trace()
    if (defaults) set_function_attribute(t, f, 0x01, defaults);
    if (kwdefaults) set_function_attribute(t, f, 0x02, kwdefaults);
    if (closure) set_function_attribute(t, f, 0x08, closure);
    t.push(f);
  }

  // SET_FUNCTION_ATTRIBUTE flag (3.13): [value, function] -> [function].
  static void set_function_attribute_op(Tracer& t, const Instruction& i) {
    ValuePtr f = t.pop();
    ValuePtr value = t.pop();
    if (f->kind != VKind::Object || !f->made_in_trace() || !PyFunction_Check(f->obj.ptr()))
      t.unsupported("SET_FUNCTION_ATTRIBUTE on " + f->describe());
    set_function_attribute(t, f, i.arg, value);
    t.push(f);
  }

  static void store_deref(Tracer& t, const Instruction& i) {
    ValuePtr v = t.pop();
    if (ValuePtr box = t.cell_of(i.arg)) {  // a captured cell (or a `nonlocal` of a function made here)
      t.will_mutate(box);
      box->cell().content = std::move(v);
      return;
    }
    const auto at = static_cast<size_t>(i.arg);
    int kind = compat::code_localsplus_kind(t.code, i.arg);
    if ((kind & compat::kFastFree) && !t.owns_free(i.arg) && t.inline_depth() == 0) t.top_frame_cell(i.arg);
    if (at < t.real_cells_.size() && t.real_cells_[at]) {  // a `nonlocal` of a real closure (see top_frame_cell)
      t.store_attr(t.real_cells_[at], "cell_contents", v);
      t.locals[at] = std::move(v);
      t.local_loaded[at] = 1;  // the traced frame's later reads see it, not the cell's old contents
      return;
    }
    if ((kind & compat::kFastFree) && !t.owns_free(i.arg))
      t.unsupported("assignment to the free variable '" + t.local_name(i.arg) + "' (nonlocal) of a real closure");
    t.locals[static_cast<size_t>(i.arg)] = std::move(v);
    t.local_loaded[static_cast<size_t>(i.arg)] = 1;
  }

  // RETURN_GENERATOR / YIELD_VALUE of an inlined generator expression (see Tracer::inline_call): the
  // generator runs straight through, each yielded value collected; the value "sent" back is None.
  static void return_generator(Tracer& t, const Instruction&) {
    if (!t.yields) t.unsupported("generator frames run as Python");
    t.push(Value::constant(py::none()));
  }

  static void yield_value(Tracer& t, const Instruction&) {
    if (!t.yields) t.unsupported("generator frames run as Python");
    t.yields->push_back(t.pop());
    t.push(Value::constant(py::none()));
  }
};

ValuePtr Tracer::top_frame_cell(int slot) {
  const auto at = static_cast<size_t>(slot);
  if (at < real_cells_.size() && real_cells_[at]) return real_cells_[at];
  SourcePtr src = guards::Source::closure_cell(slot, local_name(slot));
  PyObject* cell = src->fetch(fv);  // new
  if (!cell) unsupported("the cell of the free variable '" + local_name(slot) + "' is missing");
  if (real_cells_.size() < locals.size()) real_cells_.resize(locals.size());
  return real_cells_[at] = Value::object(py::reinterpret_steal<py::object>(cell), src);
}

py::handle unbound_cell_check() {
  static PyObject* f = py::cpp_function(
                           [](py::handle cell, py::handle name) {
                             if (!PyCell_Check(cell.ptr())) throw py::type_error("unbound_cell_check: not a cell");
                             if (PyCell_GET(cell.ptr())) return;
                             PyErr_Format(PyExc_UnboundLocalError,
                                          "cannot access local variable '%U' where it is not associated with a value",
                                          name.ptr());
                             throw py::error_already_set();
                           },
                           py::name("_cdynamo_unbound_cell_check"))
                           .release()
                           .ptr();  // process lifetime
  return f;
}

void Tracer::push_closure_cell(Tracer& t, int slot) {
  // The slot's Cell, made on first capture with the slot's current content (the same value object, so a
  // list or dict made in the trace stays one object inside and outside the function).
  ValuePtr box = t.cell_of(slot);
  if (!box) {
    ValuePtr current = t.load_local(slot);
    box = Value::new_cell(current);  // null: an empty cell (assigned later)
    if (t.cell_boxes.size() < t.locals.size()) t.cell_boxes.resize(t.locals.size());
    t.cell_boxes[static_cast<size_t>(slot)] = box;
  }
  t.push(box);
}

void Tracer::register_functions(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("LOAD_CLOSURE", FunctionOps::load_closure);
  on("MAKE_FUNCTION", FunctionOps::make_function);
  on("SET_FUNCTION_ATTRIBUTE", FunctionOps::set_function_attribute_op);
  on("STORE_DEREF", FunctionOps::store_deref);
  on("RETURN_GENERATOR", FunctionOps::return_generator);
  on("YIELD_VALUE", FunctionOps::yield_value);
}

}  // namespace cdynamo::interp
