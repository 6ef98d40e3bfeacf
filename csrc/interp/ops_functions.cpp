// ops_functions.cpp — owns functions made during the trace: LOAD_CLOSURE, MAKE_FUNCTION (lambdas, nested
// functions, comprehensions) and cell variables (STORE_DEREF / DELETE_DEREF) treated as plain locals.
#include "bytecode/bytecode.h"
#include "compat/compat.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

void load_closure(Tracer& t, const Instruction& i) {
  ValuePtr current = t.load_local(i.arg);
  if (!current) t.unsupported("closure over the unbound variable '" + t.local_name(i.arg) + "'");
  // A marker for the cell: its slot and the value it holds now (the same value object, so a list or dict
  // made in the trace stays one object inside and outside the function).
  ValuePtr cell = Value::constant(py::none());
  cell->cell_slot = i.arg;
  cell->self = current;
  t.push(cell);
}

void make_function(Tracer& t, const Instruction& i) {
  ValuePtr code_v = t.pop();
  ValuePtr closure = (i.arg & 0x08) ? t.pop() : nullptr;
  if (i.arg & 0x04) t.pop();  // annotations: not used by calls
  ValuePtr kwdefaults = (i.arg & 0x02) ? t.pop() : nullptr;
  ValuePtr defaults = (i.arg & 0x01) ? t.pop() : nullptr;
  if (code_v->kind != VKind::Object || !PyCode_Check(code_v->obj.ptr())) t.unsupported("MAKE_FUNCTION without code");
  py::object fn = py::reinterpret_steal<py::object>(PyFunction_New(code_v->obj.ptr(), t.fv.globals));  // new
  if (!fn) throw py::error_already_set();
  if (defaults) {
    if (!defaults->is_constant_like()) t.unsupported("function defaults that are not constants");
    if (PyFunction_SetDefaults(fn.ptr(), defaults->as_python().ptr()) < 0) throw py::error_already_set();
  }
  if (kwdefaults) {
    if (kwdefaults->kind != VKind::Dict) t.unsupported("keyword-only defaults of " + kwdefaults->describe());
    for (const auto& v : kwdefaults->items)
      if (!v->is_constant_like()) t.unsupported("keyword-only defaults that are not constants");
    if (PyFunction_SetKwDefaults(fn.ptr(), kwdefaults->as_python().ptr()) < 0) throw py::error_already_set();
  }
  ValuePtr f = Value::object(fn);
  f->made_in_trace = true;
  if (closure) {
    if (closure->kind != VKind::Tuple) t.unsupported("closure of " + closure->describe());
    for (const auto& c : closure->items) {
      if (c->cell_slot < 0) t.unsupported("closure cell without a slot");
      if (static_cast<size_t>(c->cell_slot) >= t.captured_cells.size()) t.captured_cells.resize(t.locals.size(), 0);
      t.captured_cells[static_cast<size_t>(c->cell_slot)] = 1;
      f->closure.push_back(c->self);
    }
  }
  t.push(f);
}

void store_deref(Tracer& t, const Instruction& i) {
  int kind = compat::code_localsplus_kind(t.code, i.arg);
  if (kind & compat::kFastFree)
    t.unsupported("assignment to the free variable '" + t.local_name(i.arg) + "' (nonlocal) is not traced yet");
  if (static_cast<size_t>(i.arg) < t.captured_cells.size() && t.captured_cells[static_cast<size_t>(i.arg)])
    t.unsupported("assignment to '" + t.local_name(i.arg) + "' after a function captured it");
  t.locals[static_cast<size_t>(i.arg)] = t.pop();
  t.local_loaded[static_cast<size_t>(i.arg)] = 1;
}

}  // namespace

void register_functions(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("LOAD_CLOSURE", load_closure);
  on("MAKE_FUNCTION", make_function);
  on("STORE_DEREF", store_deref);
}

}  // namespace cdynamo::interp
