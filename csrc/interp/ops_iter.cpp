// ops_iter.cpp — owns iteration over values known at trace time: GET_ITER / FOR_ITER (loops unroll),
// and the iterator builtins enumerate / zip / reversed over such values.
#include "bytecode/bytecode.h"
#include "compat/opargs.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

bool is_module_container(py::handle o) {
  auto& refs = PyRefs::get();
  return py::isinstance(o, refs.nn_sequential) || py::isinstance(o, refs.nn_module_list);
}

// Records on iterator `it` that it reads dict (or dict view) `src` lazily in Python.
void watch_dict(const ValuePtr& it, const ValuePtr& src, bool reversed) {
  if (src->kind != VKind::Dict && src->kind != VKind::DictView) return;
  IterWatch w;
  w.dict = src->kind == VKind::Dict ? src : src->view_of().dict;
  w.part = src->kind == VKind::Dict ? ViewPart::Keys : src->view_of().part;
  w.reversed = reversed;
  w.keys = w.dict->keys;
  w.values = w.dict->items;
  it->iter().watches.push_back(std::move(w));
}

}  // namespace

struct Tracer::IterOps {
  // Before FOR_ITER takes item `pos` of an iterator over a dict: Python raises when the dict's keys changed, and
  // reads values as they are now; the trace's items are those of when the iterator was made.
  static void check_watches(Tracer& t, const ValuePtr& it) {
    for (const auto& w : it->iter().watches) {
      const Value& d = *w.dict;
      bool same_keys = d.keys.size() == w.keys.size();
      for (size_t i = 0; same_keys && i < d.keys.size(); ++i) same_keys = d.keys[i].ptr() == w.keys[i].ptr();
      if (!same_keys) t.unsupported("a dict changed size or keys while being iterated (RuntimeError in Python)");
      if (w.part == ViewPart::Keys) continue;
      const size_t n = d.items.size(), done = std::min(it->iter().pos, n);
      for (size_t i = 0; i < n; ++i) {
        bool taken = w.reversed ? i >= n - done : i < done;
        if (!taken && d.items[i] != w.values[i])
          t.unsupported("a dict value changed while the dict's values are being iterated");
      }
    }
  }
};

ValuePtr Tracer::make_iterator(Tracer& t, const ValuePtr& seq) {
  if (seq->kind == VKind::Iter) return seq;  // iter(iterator) is the iterator itself
  ValuePtr it = Value::iterator(t.unpack_iterable(seq));
  watch_dict(it, seq, false);
  return it;
}

ValuePtr Tracer::iterator_next(Tracer& t, const ValuePtr& it) {
  IterOf& state = it->iter();
  if (!state.watches.empty()) IterOps::check_watches(t, it);
  if (state.pos < state.items.size()) return state.items[state.pos++];
  return nullptr;
}

void Tracer::refuse_unordered(const ValuePtr& d) {
  if (d->default_dict() && d->source)  // wrap_default_dict guards its keys, not their order
    unsupported("iteration over a collections.defaultdict of the frame (the order of its keys is not guarded)");
}

std::vector<ValuePtr> Tracer::unpack_iterable(const ValuePtr& v) {
  switch (v->kind) {
    case VKind::Tuple:
    case VKind::List:
      return v->items;
    case VKind::Tensor:
      return unpack_tensor(v);
    case VKind::Iter:
    {
      const IterOf& it = v->iter();
      return std::vector<ValuePtr>(it.items.begin() + static_cast<long>(it.pos), it.items.end());
    }
    case VKind::Dict: {
      refuse_unordered(v);
      std::vector<ValuePtr> ks;
      for (const auto& k : v->keys) ks.push_back(key_value(k));
      return ks;
    }
    case VKind::DictView:
      refuse_unordered(v->view_of().dict);
      return v->view_items([this](const py::object& k) { return key_value(k); });
    case VKind::Set: {
      // A set of tensors iterates in the order of their ids, known only when it runs: left to Python.
      if (v->tensor_keyed()) unsupported("iteration over a set of tensors (its order depends on their ids)");
      // In the order Python iterates a set holding these elements (inserted in this order).
      std::vector<ValuePtr> es;
      for (auto e : v->as_python()) es.push_back(Value::constant(py::reinterpret_borrow<py::object>(e)));
      return es;
    }
    case VKind::Const: {
      PyObject* o = v->obj.ptr();
      if (PyRange_Check(o) || PyTuple_Check(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) ||
          PyFrozenSet_CheckExact(o)) {
        Py_ssize_t n = PyObject_Length(o);
        if (n < 0) throw py::error_already_set();
        if (n > 100000) unsupported("iteration over " + std::to_string(n) + " constants (too long to unroll)");
        std::vector<ValuePtr> out;
        py::iterator it = py::iter(v->obj);
        for (auto item : it) {
          py::object i = py::reinterpret_borrow<py::object>(item);
          if (!is_constant_object(i)) unsupported("iteration over a constant holding " + v->describe());
          out.push_back(Value::constant(i));
        }
        return out;
      }
      break;
    }
    case VKind::Object:
      if (v->source && is_module_container(v->obj)) {
        // nn.Sequential / nn.ModuleList: the children in _modules order, read through that dict; its
        // size is guarded (keys are "0", "1", ... for these containers).
        py::object mods = v->obj.attr("_modules");
        if (!PyDict_CheckExact(mods.ptr())) unsupported("module container without a _modules dict");
        SourcePtr msrc = guards::Source::attr(v->source, "_modules");
        guards.add(guards::length_match(msrc, mods.ptr()));
        std::vector<ValuePtr> out;
        for (auto kv : py::reinterpret_borrow<py::dict>(mods)) {
          if (!PyUnicode_Check(kv.first.ptr())) unsupported("module container with a non-string key");
          if (kv.second.is_none()) unsupported("module container holding None");
          out.push_back(wrap(kv.second, guards::Source::dict_item(msrc, py::str(kv.first).cast<std::string>())));
        }
        return out;
      }
      if (auto params = parameter_list_items(*this, v)) return std::move(*params);  // library_values.cpp
      break;
    default:
      break;
  }
  if (auto items = iterate_user_object(v)) return std::move(*items);
  unsupported("iteration over " + v->describe());
}

struct Tracer::IterSteps {
  static void get_iter(Tracer& t, const Instruction&) {
    ValuePtr seq = t.peek(1);
    ValuePtr it = make_iterator(t, seq);
    t.pop();
    t.push(it);
  }

  static void for_iter(Tracer& t, const Instruction& i) {
    ValuePtr it = t.peek(1);
    if (it->kind != VKind::Iter) t.unsupported("FOR_ITER over " + it->describe());
    if (ValuePtr item = iterator_next(t, it)) {
      t.push(std::move(item));
      return;
    }
    t.pop();
    if (!i.target) t.unsupported("FOR_ITER without a target");
    // 3.12: the target is the loop's END_FOR, which the exhausted iterator skips.
    t.pc = static_cast<size_t>(t.bc.index_of(i.target)) + compat::opargs::kForIterSkip;
  }

  // END_FOR (3.12: pops the iterator and its last value; 3.13: the value, a POP_TOP after it the iterator);
  // reached only by a jump the trace never takes.
  static void end_for(Tracer& t, const Instruction& i) {
    for (int n = -bytecode::stack_effect(i.opcode, i.arg, false); n > 0; --n) t.pop();
  }
};

ValuePtr Tracer::call_iter_builtin(const std::string& name, const std::vector<ValuePtr>& args) {
  if (name == "enumerate" && (args.size() == 1 || args.size() == 2)) {
    long start = 0;
    if (args.size() == 2) {
      if (!args[1]->is_const() || !PyLong_CheckExact(args[1]->obj.ptr())) unsupported("enumerate start");
      start = args[1]->obj.cast<long>();
    }
    std::vector<ValuePtr> pairs;
    long k = start;
    for (auto& v : unpack_iterable(args[0])) pairs.push_back(Value::tuple({Value::constant(py::int_(k++)), v}));
    ValuePtr it = Value::iterator(std::move(pairs));
    watch_dict(it, args[0], false);
    return it;
  }
  if (name == "zip" && !args.empty()) {
    std::vector<std::vector<ValuePtr>> cols;
    size_t n = SIZE_MAX;
    for (const auto& a : args) {
      cols.push_back(unpack_iterable(a));
      n = std::min(n, cols.back().size());
    }
    std::vector<ValuePtr> rows;
    for (size_t r = 0; r < n; ++r) {
      std::vector<ValuePtr> row;
      for (auto& c : cols) row.push_back(c[r]);
      rows.push_back(Value::tuple(std::move(row)));
    }
    ValuePtr it = Value::iterator(std::move(rows));
    for (const auto& a : args) watch_dict(it, a, false);
    return it;
  }
  if (name == "reversed" && args.size() == 1 && args[0]->kind != VKind::Iter) {
    std::vector<ValuePtr> items = unpack_iterable(args[0]);
    ValuePtr it = Value::iterator(std::vector<ValuePtr>(items.rbegin(), items.rend()));
    watch_dict(it, args[0], true);
    return it;
  }
  if ((name == "list" || name == "tuple") && args.size() == 1 &&
      (args[0]->kind == VKind::Iter || args[0]->kind == VKind::Tuple || args[0]->kind == VKind::List)) {
    std::vector<ValuePtr> items = unpack_iterable(args[0]);
    if (args[0]->kind == VKind::Iter) args[0]->iter().pos = args[0]->iter().items.size();  // consumed
    return name == "list" ? Value::list(std::move(items)) : Value::tuple(std::move(items));
  }
  return nullptr;
}

void Tracer::register_iter(HandlerTable& t) {
  auto on = [&](const char* name, Handler h) { on_opcode(t, name, h); };
  on("GET_ITER", IterSteps::get_iter);
  on("FOR_ITER", IterSteps::for_iter);
  on("END_FOR", IterSteps::end_for);
}

}  // namespace cdynamo::interp
