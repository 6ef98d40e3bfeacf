// ops_functions.cpp — owns functions made during the trace: LOAD_CLOSURE, MAKE_FUNCTION (lambdas, nested
// functions, comprehensions) and cell variables (STORE_DEREF): plain locals until captured, then Cells.
#include "bytecode/bytecode.h"
#include "compat/compat.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

void load_closure(Tracer& t, const Instruction& i) {
  // The slot's Cell, made on first capture with the slot's current content (the same value object, so a
  // list or dict made in the trace stays one object inside and outside the function).
  ValuePtr box = t.cell_of(i.arg);
  if (!box) {
    ValuePtr current = t.load_local(i.arg);
    box = std::make_shared<Value>();
    box->kind = VKind::Cell;
    box->self = current;  // null: an empty cell (assigned later)
    box->cell_slot = i.arg;
    if (t.cell_boxes.size() < t.locals.size()) t.cell_boxes.resize(t.locals.size());
    t.cell_boxes[static_cast<size_t>(i.arg)] = box;
  }
  t.push(box);
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
      if (c->kind != VKind::Cell) t.unsupported("closure item " + c->describe() + " is not a cell");
      f->closure.push_back(c);
    }
  }
  t.push(f);
}

void store_deref(Tracer& t, const Instruction& i) {
  ValuePtr v = t.pop();
  if (ValuePtr box = t.cell_of(i.arg)) {  // a captured cell (or a `nonlocal` of a function made here)
    t.will_mutate(box);
    box->self = std::move(v);
    return;
  }
  int kind = compat::code_localsplus_kind(t.code, i.arg);
  if ((kind & compat::kFastFree) && !t.owns_free(i.arg))
    t.unsupported("assignment to the free variable '" + t.local_name(i.arg) + "' (nonlocal) of a real closure");
  t.locals[static_cast<size_t>(i.arg)] = std::move(v);
  t.local_loaded[static_cast<size_t>(i.arg)] = 1;
}

// RETURN_GENERATOR / YIELD_VALUE of an inlined generator expression (see Tracer::inline_call): the
// generator runs straight through, each yielded value collected; the value "sent" back is None.
void return_generator(Tracer& t, const Instruction&) {
  if (!t.yields) t.unsupported("generator frames run as Python");
  t.push(Value::constant(py::none()));
}

void yield_value(Tracer& t, const Instruction&) {
  if (!t.yields) t.unsupported("generator frames run as Python");
  t.yields->push_back(t.pop());
  t.push(Value::constant(py::none()));
}

}  // namespace

void register_functions(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("LOAD_CLOSURE", load_closure);
  on("MAKE_FUNCTION", make_function);
  on("STORE_DEREF", store_deref);
  on("RETURN_GENERATOR", return_generator);
  on("YIELD_VALUE", yield_value);
}

}  // namespace cdynamo::interp
