// lists.cpp — owns lists, tuples and sets in the trace: their methods (append ... sort, count/index, add ...
// union), set() / frozenset(), BUILD_SET / SET_ADD / SET_UPDATE, and the container operators (+ * on
// sequences, | & - ^ on sets, | on dicts). Changes to containers from the frame are recorded through
// Tracer::will_mutate and written back after the graph.
#include "bytecode/bytecode.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

void add_element(const ValuePtr& s, py::object e) {
  if (s->find_key(e) < 0) s->keys.push_back(std::move(e));
}

}  // namespace

struct Tracer::ListOps {
  // 1 if `a` and `b` compare equal the way list.index / list.remove / `in` see them (identity first, then
  // ==), 0 if not; Unsupported when that needs a tensor's data or a user object's __eq__.
  static bool equal_items(Tracer& t, const ValuePtr& a, const ValuePtr& b) {
    if (a == b) return true;
    if (a->is_tensor() && b->is_tensor() && a->tensor().node == b->tensor().node) return true;
    if (a->is_constant_like() && b->is_constant_like()) {
      int r = PyObject_RichCompareBool(a->as_python().ptr(), b->as_python().ptr(), Py_EQ);
      if (r < 0) throw py::error_already_set();
      return r == 1;
    }
    if (a->kind == VKind::Object && b->kind == VKind::Object && a->obj.is(b->obj)) return true;
    t.unsupported("comparing " + a->describe() + " with " + b->describe() + " (needs its data)");
  }

  static long find_item(Tracer& t, const std::vector<ValuePtr>& items, const ValuePtr& x) {
    for (size_t i = 0; i < items.size(); ++i)
      if (equal_items(t, items[i], x)) return static_cast<long>(i);
    return -1;
  }

  static long int_arg(Tracer& t, const ValuePtr& v, const char* what) {
    if (!v->is_const() || !PyLong_Check(v->obj.ptr())) t.unsupported(std::string(what) + " with " + v->describe());
    return v->obj.cast<long>();
  }

  static py::object element_of(Tracer& t, const ValuePtr& v) {
    // A tensor hashes by identity: its example stands for it, as for a dict key (Trace::tensor_keys).
    if (v->is_tensor() && v->tensor().example && guards::is_tensor(v->tensor().example.ptr())) {
      t.tensor_keys.emplace(v->tensor().example.ptr(), v);
      return v->tensor().example;
    }
    if (!v->is_const()) t.unsupported("set element " + v->describe() + " (only constants are traced in sets)");
    if (PyObject_Hash(v->obj.ptr()) == -1) throw py::error_already_set();
    return v->obj;
  }

  static std::vector<py::object> elements_of(Tracer& t, const ValuePtr& v) {
    if (v->kind == VKind::Set) return v->keys;
    std::vector<py::object> out;
    for (const auto& i : t.unpack_iterable(v)) out.push_back(element_of(t, i));
    return out;
  }

  // Python's own result of a set method / operator on the current elements: the order sets iterate in.
  static ValuePtr python_set_result(Tracer& t, py::object r) {
    if (!PySet_Check(r.ptr()) && !PyFrozenSet_Check(r.ptr())) t.unsupported("set operation result is not a set");
    if (PyFrozenSet_Check(r.ptr())) return Value::frozenset_value(std::move(r));  // also an immutable constant
    std::vector<py::object> elements;
    for (auto e : r) elements.push_back(py::reinterpret_borrow<py::object>(e));
    return Value::set(std::move(elements));
  }

  static void build_set(Tracer& t, const Instruction& i) {
    std::vector<ValuePtr> parts = t.popn(static_cast<size_t>(i.arg));
    ValuePtr s = Value::set({});
    for (const auto& p : parts) add_element(s, element_of(t, p));
    t.push(s);
  }

  static ValuePtr& own_set(Tracer& t, ValuePtr& s, const char* what) {
    if (s->kind != VKind::Set || s->frozenset_result()) t.unsupported(std::string(what) + " on " + s->describe());
    return s;
  }

  // SET_ADD(i): set comprehension step; the set is `i` below the element.
  static void set_add(Tracer& t, const Instruction& i) {
    ValuePtr e = t.pop();
    ValuePtr& s = own_set(t, t.peek(static_cast<size_t>(i.arg)), "SET_ADD");
    py::object k = element_of(t, e);
    t.will_mutate(s);
    add_element(s, k);
  }

  // SET_UPDATE(i): `{*a, *b}`; the set is `i` below the iterable.
  static void set_update(Tracer& t, const Instruction& i) {
    ValuePtr src = t.pop();
    ValuePtr& s = own_set(t, t.peek(static_cast<size_t>(i.arg)), "SET_UPDATE");
    std::vector<py::object> es = elements_of(t, src);
    t.will_mutate(s);
    for (auto& e : es) add_element(s, e);
  }
};

ValuePtr Tracer::call_list_method(ValuePtr l, const std::string& name, std::vector<ValuePtr> args, Kwargs kwargs) {
  bool is_list = l->kind == VKind::List;
  std::string what = std::string(is_list ? "list." : "tuple.") + name;
  if (name == "count" && args.size() == 1 && kwargs.empty()) {
    long n = 0;
    for (const auto& i : l->items) n += ListOps::equal_items(*this, i, args[0]) ? 1 : 0;
    return Value::constant(py::int_(n));
  }
  if (name == "index" && args.size() == 1 && kwargs.empty()) {
    long at = ListOps::find_item(*this, l->items, args[0]);
    if (at < 0) unsupported(what + " of a missing value (ValueError is raised by Python)");
    return Value::constant(py::int_(at));
  }
  if (!is_list) unsupported(what + "() is not traced");
  if (name == "copy" && args.empty() && kwargs.empty()) return Value::list(l->items);
  if (!kwargs.empty() && name != "sort") unsupported(what + " with keyword arguments");
  std::vector<ValuePtr>& items = l->items;
  if (name == "append" && args.size() == 1) {
    will_mutate(l);
    items.push_back(args[0]);
    return Value::constant(py::none());
  }
  if (name == "extend" && args.size() == 1) {
    std::vector<ValuePtr> more = unpack_iterable(args[0]);
    will_mutate(l);
    items.insert(items.end(), more.begin(), more.end());
    return Value::constant(py::none());
  }
  if (name == "insert" && args.size() == 2) {
    long n = static_cast<long>(items.size());
    long at = ListOps::int_arg(*this, args[0], "list.insert");
    if (at < 0) at = std::max(0L, at + n);
    at = std::min(at, n);
    will_mutate(l);
    items.insert(items.begin() + at, args[1]);
    return Value::constant(py::none());
  }
  if (name == "pop" && args.size() <= 1) {
    long n = static_cast<long>(items.size());
    long at = args.empty() ? n - 1 : ListOps::int_arg(*this, args[0], "list.pop");
    if (at < 0) at += n;
    if (at < 0 || at >= n) unsupported("list.pop out of range (IndexError is raised by Python)");
    ValuePtr v = items[static_cast<size_t>(at)];
    will_mutate(l);
    items.erase(items.begin() + at);
    return v;
  }
  if (name == "remove" && args.size() == 1) {
    long at = ListOps::find_item(*this, items, args[0]);
    if (at < 0) unsupported("list.remove of a missing value (ValueError is raised by Python)");
    will_mutate(l);
    items.erase(items.begin() + at);
    return Value::constant(py::none());
  }
  if (name == "clear" && args.empty()) {
    will_mutate(l);
    items.clear();
    return Value::constant(py::none());
  }
  if (name == "reverse" && args.empty()) {
    will_mutate(l);
    std::reverse(items.begin(), items.end());
    return Value::constant(py::none());
  }
  if (name == "sort" && args.empty()) {
    // Sorted at trace time by Python itself; only lists of constants (whose order is known).
    for (const auto& i : items)
      if (!i->is_constant_like()) unsupported("list.sort of " + i->describe());
    ValuePtr sorted = fold_call(PyRefs::get().builtins.attr("sorted"), "list.sort", {Value::list(items)}, kwargs);
    will_mutate(l);
    items = sorted->items;
    return Value::constant(py::none());
  }
  unsupported(what + "() is not traced");
}

ValuePtr Tracer::call_set_method(ValuePtr s, const std::string& name, std::vector<ValuePtr> args, Kwargs kwargs) {
  if (!kwargs.empty()) unsupported("set." + name + " with keyword arguments");
  bool frozen = bool(s->frozenset_result());
  if ((name == "add" || name == "discard" || name == "remove") && args.size() == 1 && !frozen) {
    py::object e = ListOps::element_of(*this, args[0]);
    int at = s->find_key(e);
    if (name == "remove" && at < 0) unsupported("set.remove of a missing element (KeyError is raised by Python)");
    will_mutate(s);
    if (name == "add" && at < 0) s->keys.push_back(e);
    if (name != "add" && at >= 0) s->keys.erase(s->keys.begin() + at);
    return Value::constant(py::none());
  }
  if ((name == "update" || name == "clear") && !frozen) {
    std::vector<py::object> more;
    for (const auto& a : args) {
      std::vector<py::object> es = ListOps::elements_of(*this, a);
      more.insert(more.end(), es.begin(), es.end());
    }
    will_mutate(s);
    if (name == "clear") s->keys.clear();
    for (auto& e : more) add_element(s, e);
    return Value::constant(py::none());
  }
  if (name == "copy" && args.empty()) return Value::set(s->keys);
  static const char* pure[] = {"union", "intersection", "difference", "symmetric_difference", "issubset",
                               "issuperset", "isdisjoint"};
  for (const char* p : pure) {
    if (name != p) continue;
    py::tuple pargs(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      py::list es;
      for (auto& e : ListOps::elements_of(*this, args[i])) es.append(e);
      pargs[i] = es;
    }
    py::object r = s->as_python().attr(p)(*pargs);
    if (PyBool_Check(r.ptr())) return Value::constant(r);
    return ListOps::python_set_result(*this, r);
  }
  unsupported("set." + name + "() is not traced");
}

ValuePtr Tracer::make_set(const std::vector<ValuePtr>& args, bool frozen) {
  if (args.size() > 1) unsupported("set() with more than one argument");
  ValuePtr s = Value::set({});
  if (!args.empty())
    for (auto& e : ListOps::elements_of(*this, args[0])) add_element(s, e);
  if (frozen) {  // a frozenset of constants is itself a constant
    py::list es;
    for (auto& e : s->keys) es.append(e);
    return Value::constant(py::reinterpret_steal<py::object>(PyFrozenSet_New(es.ptr())));
  }
  return s;
}

ValuePtr Tracer::container_operator(const std::string& op, const ValuePtr& a, const ValuePtr& b) {
  bool inplace = op.size() > 1 && op[0] == 'i' && op != "is_" && op != "is_not";
  std::string base = inplace ? op.substr(1) : op;
  // Sets and dict views (and constants on the other side): Python's own operator on their current contents.
  auto set_like = [](const ValuePtr& v) { return v->kind == VKind::Set || v->kind == VKind::DictView; };
  if (set_like(a) || set_like(b)) {
    // dict_values has no == of its own: two views are equal only when they are the same object.
    auto values_view = [](const ValuePtr& v) { return v->kind == VKind::DictView && v->view_of().part == ViewPart::Values; };
    if ((base == "eq" || base == "ne") && (values_view(a) || values_view(b)))
      return Value::constant(py::bool_((a == b) == (base == "eq")));
    static const char* const traced[] = {"or_", "and_", "sub", "xor", "eq", "ne", "lt", "le", "gt", "ge"};
    bool known = false;
    for (const char* t : traced) known = known || base == t;
    if (!known) unsupported("operator." + op + " on " + a->describe() + " and " + b->describe());
    auto to_py = [&](const ValuePtr& v) -> py::object {
      if (set_like(v) || v->is_constant_like()) return v->as_python();  // a view of tensors: Unsupported
      unsupported("set operator with " + v->describe());
    };
    py::object r;
    try {
      r = PyRefs::get().operator_mod.attr(base.c_str())(to_py(a), to_py(b));
    } catch (py::error_already_set& e) {
      unsupported("operator." + op + " on " + a->describe() + " and " + b->describe() + " raises " + e.what());
    }
    if (PyBool_Check(r.ptr())) return Value::constant(r);
    if (!PyAnySet_Check(r.ptr())) unsupported("operator." + op + " on " + a->describe() + " gave a non-set");
    ValuePtr out = ListOps::python_set_result(*this, r);
    if (inplace && a->kind == VKind::Set) {
      ValuePtr target = a;
      ListOps::own_set(*this, target, "in-place set operator");
      will_mutate(target);
      target->keys = out->keys;
      return target;
    }
    return out;
  }
  if (a->kind == VKind::Dict && b->kind == VKind::Dict && base == "or_") {
    // d | other keeps d's type (a defaultdict's `|` gives a defaultdict of its factory); other | d is a dict.
    ValuePtr target = inplace                ? a
                      : a->default_dict() ? Value::default_dict_of(a->default_dict()->factory, a->keys, a->items)
                                           : Value::dict(a->keys, a->items);
    if (inplace) will_mutate(target);
    for (size_t i = 0; i < b->keys.size(); ++i) {
      int at = target->find_key(b->keys[i]);
      if (at >= 0) {
        target->items[static_cast<size_t>(at)] = b->items[i];
      } else {
        target->keys.push_back(b->keys[i]);
        target->items.push_back(b->items[i]);
      }
    }
    return target;
  }
  bool seq_a = a->kind == VKind::List || a->kind == VKind::Tuple;
  bool seq_b = b->kind == VKind::List || b->kind == VKind::Tuple;
  if (base == "add" && seq_a) {
    std::vector<ValuePtr> more;
    if (a->kind == VKind::List && inplace) {
      more = unpack_iterable(b);  // list += iterable extends in place
      will_mutate(a);
      a->items.insert(a->items.end(), more.begin(), more.end());
      return a;
    }
    if (!seq_b && !(b->is_const() && PyTuple_Check(b->obj.ptr()))) unsupported("sequence + " + b->describe());
    if ((a->kind == VKind::List) != (b->kind == VKind::List)) unsupported("list + tuple (TypeError in Python)");
    more = unpack_iterable(b);
    std::vector<ValuePtr> items = a->items;
    items.insert(items.end(), more.begin(), more.end());
    return a->kind == VKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  if (base == "mul" && (seq_a || seq_b)) {
    const ValuePtr& seq = seq_a ? a : b;
    long n = std::max(0L, ListOps::int_arg(*this, seq_a ? b : a, "sequence repetition"));
    if (n * static_cast<long>(seq->items.size()) > 100000) unsupported("sequence repetition too long to trace");
    std::vector<ValuePtr> items;
    for (long k = 0; k < n; ++k) items.insert(items.end(), seq->items.begin(), seq->items.end());
    if (inplace && seq_a && a->kind == VKind::List) {
      will_mutate(a);
      a->items = std::move(items);
      return a;
    }
    return seq->kind == VKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  return nullptr;
}

void Tracer::register_lists(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("BUILD_SET", ListOps::build_set);
  on("SET_ADD", ListOps::set_add);
  on("SET_UPDATE", ListOps::set_update);
}

}  // namespace cdynamo::interp
