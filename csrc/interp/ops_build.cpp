// ops_build.cpp — owns handlers that build and unpack containers and strings: BUILD_*, UNPACK_SEQUENCE,
// LIST_EXTEND, LIST_TO_TUPLE, FORMAT_VALUE (3.13: CONVERT_VALUE, FORMAT_SIMPLE, FORMAT_WITH_SPEC).
#include "bytecode/bytecode.h"
#include "compat/opargs.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

// str / repr / ascii of obj by a conversion code (compat/opargs.h; 0: none).
py::object convert(py::object obj, int conv) {
  if (conv == compat::opargs::kConvertStr) return py::str(obj);
  if (conv == compat::opargs::kConvertRepr) return py::repr(obj);
  if (conv == compat::opargs::kConvertAscii) return loaded_module("builtins").attr("ascii")(obj);
  return obj;
}

}  // namespace

struct Tracer::BuildOps {
  static void build_tuple(Tracer& t, const Instruction& i) { t.push(Value::tuple(t.popn(i.arg))); }

  static void build_list(Tracer& t, const Instruction& i) { t.push(Value::list(t.popn(i.arg))); }

  static void build_slice(Tracer& t, const Instruction& i) {
    std::vector<ValuePtr> parts = t.popn(i.arg);
    t.push(slice_of(t, parts[0], parts[1], i.arg == 3 ? parts[2] : nullptr));
  }

  static void unpack_sequence(Tracer& t, const Instruction& i) {
    ValuePtr seq = t.pop();
    std::vector<ValuePtr> items;
    if (seq->kind == VKind::Tuple || seq->kind == VKind::List) {
      items = seq->items;
    } else if (seq->is_const() && PyTuple_Check(seq->obj.ptr())) {
      for (auto item : py::reinterpret_borrow<py::tuple>(seq->obj))
        items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
    } else if (seq->is_tensor()) {
      // Unpacking a tensor iterates its first dimension.
      py::object shape = seq->tensor().example.attr("shape");
      if (py::len(shape) == 0) t.unsupported("iteration over a 0-d tensor");
      long n = shape[py::int_(0)].cast<long>();
      if (n != i.arg) t.unsupported("unpacking a tensor of the wrong length");
      py::object getitem = PyRefs::get().operator_mod.attr("getitem");
      for (long k = 0; k < n; ++k) items.push_back(t.apply_operator(getitem, {seq, Value::constant(py::int_(k))}));
    } else {
      t.unsupported("unpacking " + seq->describe());
    }
    if (static_cast<int>(items.size()) != i.arg) t.unsupported("unpacking a sequence of the wrong length");
    for (auto it = items.rbegin(); it != items.rend(); ++it) t.push(*it);
  }

  // UNPACK_EX: `a, *rest, b = seq` (arg = before | after << 8); pushes b, rest (a list), a.
  static void unpack_ex(Tracer& t, const Instruction& i) {
    std::vector<ValuePtr> items = t.unpack_iterable(t.peek(1));
    size_t before = static_cast<size_t>(i.arg & 0xff), after = static_cast<size_t>(i.arg >> 8);
    if (items.size() < before + after) t.unsupported("not enough values to unpack");
    t.pop();
    for (size_t k = 0; k < after; ++k) t.push(items[items.size() - 1 - k]);
    t.push(Value::list(std::vector<ValuePtr>(items.begin() + static_cast<long>(before),
                                             items.end() - static_cast<long>(after))));
    for (size_t k = before; k-- > 0;) t.push(items[k]);
  }

  static void list_extend(Tracer& t, const Instruction& i) {
    ValuePtr src = t.pop();
    ValuePtr& list = t.peek(i.arg);
    if (list->kind != VKind::List) t.unsupported("LIST_EXTEND on " + list->describe());
    std::vector<ValuePtr> items = list->items;
    if (src->kind == VKind::Tuple || src->kind == VKind::List) {
      items.insert(items.end(), src->items.begin(), src->items.end());
    } else if (src->is_const() && PyTuple_Check(src->obj.ptr())) {
      for (auto item : py::reinterpret_borrow<py::tuple>(src->obj))
        items.push_back(Value::constant(py::reinterpret_borrow<py::object>(item)));
    } else {
      t.unsupported("extending a list with " + src->describe());
    }
    list = Value::list(std::move(items));
  }

  // LIST_APPEND(i): list literal / comprehension building; the list is below `i - 1` other items.
  static void list_append(Tracer& t, const Instruction& i) {
    ValuePtr v = t.pop();
    ValuePtr& list = t.peek(i.arg);
    if (list->kind != VKind::List || list->source) t.unsupported("LIST_APPEND on " + list->describe());
    list->items.push_back(std::move(v));  // in place: a list made in the trace is one object wherever it is
  }

  static void list_to_tuple(Tracer& t, const Instruction&) {
    ValuePtr l = t.pop();
    if (l->kind != VKind::List) t.unsupported("LIST_TO_TUPLE on " + l->describe());
    t.push(Value::tuple(l->items));
  }

  // FORMAT_VALUE (3.11, 3.12): conversion in the low two bits, a format spec on the stack with bit 2.
  static void format_value(Tracer& t, const Instruction& i) {
    ValuePtr spec = (i.arg & 0x04) ? t.pop() : nullptr;
    ValuePtr v = t.pop();
    if (!v->is_constant_like() || (spec && !spec->is_const())) t.unsupported("f-string of " + v->describe());
    py::object obj = convert(v->as_python(), i.arg & 0x03);
    py::object out = loaded_module("builtins").attr("format")(obj, spec ? spec->obj : py::str(""));
    t.push(Value::constant(out));
  }

  // 3.13 splits FORMAT_VALUE: CONVERT_VALUE (the conversion), FORMAT_SIMPLE and FORMAT_WITH_SPEC.
  static void convert_value(Tracer& t, const Instruction& i) {
    ValuePtr v = t.peek(1);
    if (!v->is_constant_like()) t.unsupported("f-string conversion of " + v->describe());
    py::object out = convert(v->as_python(), i.arg);
    t.pop();
    t.push(Value::constant(out));
  }

  static void format_with(Tracer& t, const ValuePtr& spec) {
    ValuePtr v = t.peek(1);
    if (!v->is_constant_like() || (spec && !spec->is_const())) t.unsupported("f-string of " + v->describe());
    py::object out = loaded_module("builtins").attr("format")(v->as_python(), spec ? spec->obj : py::str(""));
    t.pop();
    t.push(Value::constant(out));
  }

  static void format_simple(Tracer& t, const Instruction&) { format_with(t, nullptr); }

  static void format_with_spec(Tracer& t, const Instruction&) {
    ValuePtr spec = t.pop();
    format_with(t, spec);
  }

  static void build_string(Tracer& t, const Instruction& i) {
    std::vector<ValuePtr> parts = t.popn(i.arg);
    std::string s;
    for (const auto& p : parts) {
      if (!p->is_const() || !PyUnicode_Check(p->obj.ptr())) t.unsupported("BUILD_STRING of " + p->describe());
      s += p->obj.cast<std::string>();
    }
    t.push(Value::constant(py::str(s)));
  }
};

ValuePtr Tracer::slice_of(Tracer& t, const ValuePtr& start, const ValuePtr& stop, const ValuePtr& step) {
  if (start->is_sym() || stop->is_sym() || (step && step->is_sym())) {
    for (const ValuePtr* p : {&start, &stop, &step})
      if (*p && !(*p)->is_const() && !(*p)->is_sym()) t.unsupported("slice bound " + (*p)->describe() + " is not a number");
    return Value::slice_value(SliceOf{start, stop, step ? step : Value::constant(py::none())});
  }
  for (const ValuePtr* p : {&start, &stop, &step})
    if (*p && !(*p)->is_const()) t.unsupported("slice bound " + (*p)->describe() + " is not a constant");
  PyObject* s = PySlice_New(start->obj.ptr(), stop->obj.ptr(), step ? step->obj.ptr() : nullptr);  // new reference
  if (!s) throw py::error_already_set();
  return Value::constant(py::reinterpret_steal<py::object>(s));  // s stolen
}

void Tracer::register_build(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("BUILD_TUPLE", BuildOps::build_tuple);
  on("BUILD_LIST", BuildOps::build_list);
  on("BUILD_SLICE", BuildOps::build_slice);
  on("UNPACK_SEQUENCE", BuildOps::unpack_sequence);
  on("LIST_EXTEND", BuildOps::list_extend);
  on("UNPACK_EX", BuildOps::unpack_ex);
  on("LIST_APPEND", BuildOps::list_append);
  on("LIST_TO_TUPLE", BuildOps::list_to_tuple);
  on("FORMAT_VALUE", BuildOps::format_value);
  on("CONVERT_VALUE", BuildOps::convert_value);
  on("FORMAT_SIMPLE", BuildOps::format_simple);
  on("FORMAT_WITH_SPEC", BuildOps::format_with_spec);
  on("BUILD_STRING", BuildOps::build_string);
}

}  // namespace cdynamo::interp
