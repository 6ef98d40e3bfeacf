// rebuild.cpp — owns the value-rebuilding emitter shared by straight-line and graph-break codegen.
#include "codegen/rebuild.h"

#include "interp/services.h"

#include <unordered_set>

#include "interp/tracer.h"

namespace cdynamo::codegen {

using interp::ValuePtr;
using interp::VKind;

namespace {

// A container from the frame with its real object: rebuilt by loading its Source (identity kept).
bool from_frame(const ValuePtr& v) { return v->is_container() && v->source && v->frame_container(); }

bool has_items(const ValuePtr& v) {
  return v->kind == VKind::Tuple || v->kind == VKind::List || v->kind == VKind::Dict || v->kind == VKind::Instance ||
         v->kind == VKind::Record;
}

// A function made in the trace (MAKE_FUNCTION): rebuilt from its code with new cells holding the cells' values.
// (Other values made in the trace share the flag: partials, super() slots; they are not functions.)
bool made_function(const ValuePtr& v) {
  return v->kind == VKind::Object && v->made_in_trace() && PyFunction_Check(v->obj.ptr());
}

// functools.partial(func, *args, **keywords) called in the trace: rebuilt by calling functools.partial again
// (interp::PartialOf: func, args, keyword names / values).
bool made_partial(const ValuePtr& v) { return v->made_in_trace() && v->partial(); }

thread_local const std::unordered_map<PyObject*, ValuePtr>* g_tensor_keys = nullptr;  // see TensorKeysScope

// The tensor values of a dict's keys or a set's elements that are tensors (by their examples), in order; Unsupported
// when one is not known (no TensorKeysScope).
std::vector<ValuePtr> tensor_key_values(const ValuePtr& v) {
  std::vector<ValuePtr> out;
  if (v->kind != VKind::Dict && v->kind != VKind::Set) return out;
  for (const auto& k : v->keys) {
    if (!guards::is_tensor(k.ptr())) continue;
    auto it = g_tensor_keys ? g_tensor_keys->find(k.ptr()) : decltype(g_tensor_keys->end()){};
    if (!g_tensor_keys || it == g_tensor_keys->end())
      throw interp::Unsupported("a dict or set keyed by a tensor the trace does not know");
    out.push_back(it->second);
  }
  return out;
}

// The values `v` holds that are rebuilt with it: items, a closure's cells, a cell's content, a partial's parts.
std::vector<ValuePtr> held(const ValuePtr& v) {
  if ((v->kind == VKind::Dict || v->kind == VKind::Set) && !v->frame_container()) {
    std::vector<ValuePtr> out = tensor_key_values(v);  // tensor keys first, then what the rest holds
    if (!out.empty()) {
      if (const interp::DictOf* dd = v->default_dict()) out.push_back(dd->factory);
      out.insert(out.end(), v->items.begin(), v->items.end());
      return out;
    }
  }
  if (const interp::DictOf* dd = v->default_dict()) {  // its factory, then its values
    std::vector<ValuePtr> out{dd->factory};
    out.insert(out.end(), v->items.begin(), v->items.end());
    return out;
  }
  if (has_items(v)) return v->items;
  if (made_function(v)) return v->function().closure;
  if (made_partial(v)) {
    const interp::PartialOf& p = *v->partial();
    std::vector<ValuePtr> out{p.fn};
    out.insert(out.end(), p.args.begin(), p.args.end());
    out.insert(out.end(), p.kw_values.begin(), p.kw_values.end());
    return out;
  }
  if (v->kind == VKind::Cell && v->cell().content) return {v->cell().content};
  if (v->kind == VKind::DictView) return {v->view_of().dict};
  return {};
}

// A value rebuilt from the values it holds (held() is not empty for it).
bool holds_values(const ValuePtr& v) {
  return has_items(v) || (v->kind == VKind::Set && !v->frame_container() && !tensor_key_values(v).empty()) || made_function(v) ||
         made_partial(v) || v->kind == VKind::Cell || v->kind == VKind::DictView;
}

// Objects with identity the trace made: rebuilt once when reached twice (two closures over one cell; a torch context
// object `with torch.autocast(...) as ac` stored in a list and held in a local).
bool has_identity(const ValuePtr& v) {
  return v->kind == VKind::List || v->kind == VKind::Dict || v->kind == VKind::Instance || v->kind == VKind::Record ||
         v->kind == VKind::Cell || made_function(v) || made_partial(v) || v->torch_ctx();
}

// The receiver a bound method value carries (a tensor method, or a method of an object the trace made):
// rebuilt with it, so it is part of what the rebuilt state shares.
bool bound_receiver(const ValuePtr& v) {
  return v->receiver() != nullptr;
}

void collect(const ValuePtr& v, std::vector<graph::Node*>& out, std::unordered_set<graph::Node*>& seen) {
  if (v->is_tensor()) {
    if (!v->source && seen.insert(v->tensor().node).second) out.push_back(v->tensor().node);
  } else if (v->is_sym()) {
    // A size live after the graph (returned, or held across a break) is a graph output, as in torch._dynamo:
    // the continuation gets it as an int argument (dynamic there too) instead of a specialised constant.
    if (!v->source && seen.insert(v->sym().node).second) out.push_back(v->sym().node);
  } else if (holds_values(v)) {
    if (from_frame(v)) return;  // rebuilt from its source
    for (const auto& i : held(v)) collect(i, out, seen);
  } else if (bound_receiver(v)) {
    collect(v->receiver(), out, seen);
  }
}

// The callable that remakes the torch context object `obj` (the trace's stand-in, borrowed) after a graph: `make`, or,
// once the trace entered it (torch.autocast's prev* attributes recorded, interp/torch_contexts.cpp), a
// cdynamo._ctx_objects.entered partial that also sets those attributes as eager's __enter__ left them.
py::object remade_context(py::handle obj, const py::object& make) {
  py::dict attrs;
  for (const char* name : {"prev", "prev_fastdtype", "prev_cache_enabled"}) {
    PyObject* v = PyObject_GetAttrString(obj.ptr(), name);  // new reference or NULL
    if (!v) {
      PyErr_Clear();
      return make;
    }
    attrs[name] = py::reinterpret_steal<py::object>(v);
  }
  return interp::PyRefs::get().functools_partial(interp::services().ctx_entered, make, attrs);
}

// A new cell holding args[0], or an empty cell without arguments (a closure rebuilt after the graph).
PyObject* make_cell(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "_make_cell([content])");
    return nullptr;
  }
  return PyCell_New(nargs ? args[0] : nullptr);  // new reference
}

// A function like `template` (code, globals, name, qualname, defaults, kwdefaults: all fixed when the trace made
// it) over the cells `closure` (a tuple): a function the trace made, rebuilt after the graph (borrowed args).
PyObject* make_function(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyFunction_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_make_function(template, cells)");
    return nullptr;
  }
  PyObject* t = args[0];
  PyObject* qualname = PyObject_GetAttrString(t, "__qualname__");  // new
  if (!qualname) return nullptr;
  PyObject* fn = PyFunction_NewWithQualName(PyFunction_GET_CODE(t), PyFunction_GET_GLOBALS(t), qualname);  // new
  Py_DECREF(qualname);  // not stolen
  if (!fn) return nullptr;
  bool ok = true;
  if (PyFunction_GET_DEFAULTS(t)) ok = ok && PyFunction_SetDefaults(fn, PyFunction_GET_DEFAULTS(t)) == 0;
  if (PyFunction_GET_KW_DEFAULTS(t)) ok = ok && PyFunction_SetKwDefaults(fn, PyFunction_GET_KW_DEFAULTS(t)) == 0;
  if (PyTuple_GET_SIZE(args[1]) > 0) ok = ok && PyFunction_SetClosure(fn, args[1]) == 0;
  if (!ok) {
    Py_DECREF(fn);
    return nullptr;
  }
  return fn;  // new reference
}

// Writes `contents` into `target` in place, keeping its identity: list[:] = contents, or clear() and
// update() for dicts and sets. Called by rewritten code after the graph (borrowed arguments).
PyObject* write_back(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "_write_back(target, contents)");
    return nullptr;
  }
  PyObject* target = args[0];
  PyObject* contents = args[1];
  if (PyList_Check(target)) {
    if (PyList_SetSlice(target, 0, PY_SSIZE_T_MAX, contents) < 0) return nullptr;
    Py_RETURN_NONE;
  }
  if (PyDict_Check(target)) {
    PyDict_Clear(target);
    if (PyDict_Update(target, contents) < 0) return nullptr;
    Py_RETURN_NONE;
  }
  if (PySet_Check(target)) {
    if (PySet_Clear(target) < 0) return nullptr;
    PyObject* r = PyObject_CallMethod(target, "update", "O", contents);  // new
    if (!r) return nullptr;
    Py_DECREF(r);
    Py_RETURN_NONE;
  }
  PyErr_Format(PyExc_TypeError, "_write_back: cannot write into %s", Py_TYPE(target)->tp_name);
  return nullptr;
}

// cls.__new__(cls) at C level: type->tp_new(type, (), NULL), no __init__. `type` is borrowed; returns a new
// reference, or NULL with a Python error set.
PyObject* new_empty(PyTypeObject* type) {
  PyObject* empty = PyTuple_New(0);  // new
  if (!empty) return nullptr;
  PyObject* obj = type->tp_new(type, empty, nullptr);  // new, or NULL
  Py_DECREF(empty);
  return obj;
}

// Makes an object of a plain class with the given attributes (cls.__new__(cls), then its __dict__), for
// an object the trace created. Called by rewritten code (borrowed arguments).
PyObject* new_object(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_new_object(cls, attrs)");
    return nullptr;
  }
  PyObject* obj = new_empty(reinterpret_cast<PyTypeObject*>(args[0]));  // new
  if (!obj) return nullptr;
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  if (!dictptr) {
    Py_DECREF(obj);
    PyErr_SetString(PyExc_TypeError, "_new_object: the class has no instance __dict__");
    return nullptr;
  }
  if (!*dictptr && !(*dictptr = PyDict_New())) {
    Py_DECREF(obj);
    return nullptr;
  }
  if (PyDict_Update(*dictptr, args[1]) < 0) {
    Py_DECREF(obj);
    return nullptr;
  }
  return obj;  // new reference
}

// Makes a transformers ModelOutput the trace created, as its dataclass __init__ leaves it, without running
// it: cls.__new__(cls), then per field in field order object.__setattr__(name, value) and, for a value that
// is not None, OrderedDict.__setitem__(name, value). That is what ModelOutput's __setattr__ does for each
// field and what its __post_init__ repeats, on the path the trace modelled (records.cpp refuses the other);
// rebuild decides this only for classes whose pytree registration (__post_init__'s other effect) is done.
// Called by rewritten code as _new_record(cls, names, *values) (borrowed arguments).
PyObject* new_record(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1]) || PyTuple_GET_SIZE(args[1]) != nargs - 2 ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(args[0]), &PyODict_Type)) {
    PyErr_SetString(PyExc_TypeError, "_new_record(cls, names, *values)");
    return nullptr;
  }
  PyObject* obj = new_empty(reinterpret_cast<PyTypeObject*>(args[0]));  // new
  if (!obj) return nullptr;
  for (Py_ssize_t i = 0; i < nargs - 2; ++i) {
    PyObject* name = PyTuple_GET_ITEM(args[1], i);  // borrowed
    PyObject* value = args[i + 2];                  // borrowed
    if (PyObject_GenericSetAttr(obj, name, value) < 0 || (value != Py_None && PyODict_SetItem(obj, name, value) < 0)) {
      Py_DECREF(obj);
      return nullptr;
    }
  }
  return obj;  // new reference
}

// A builtin function object for `def` (created once, kept for the process lifetime: code objects hold it).
py::handle builtin_fn(PyMethodDef* def, PyObject** slot) {
  if (!*slot) *slot = PyCFunction_New(def, nullptr);  // new reference, never released
  if (!*slot) throw py::error_already_set();
  return *slot;
}

PyMethodDef new_object_def = {"_cdynamo_new_object", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(new_object)),
                              METH_FASTCALL, "Makes an object the trace created, with its attributes."};
PyMethodDef write_back_def = {"_cdynamo_write_back", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(write_back)),
                              METH_FASTCALL, "Writes a traced container's final contents back into it."};
PyObject* new_object_obj = nullptr;
PyMethodDef new_record_def = {"_cdynamo_new_record", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(new_record)),
                              METH_FASTCALL, "Makes a ModelOutput the trace created, with its fields."};
PyObject* new_record_obj = nullptr;
PyObject* write_back_obj = nullptr;
PyMethodDef make_cell_def = {"_cdynamo_make_cell", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_cell)),
                             METH_FASTCALL, "A cell for a closure the trace made."};
PyMethodDef make_function_def = {"_cdynamo_make_function",
                                 reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(make_function)), METH_FASTCALL,
                                 "A function the trace made, over new cells."};
PyObject* make_cell_obj = nullptr;
PyObject* make_function_obj = nullptr;

py::handle new_object_fn() { return builtin_fn(&new_object_def, &new_object_obj); }
py::handle new_record_fn() { return builtin_fn(&new_record_def, &new_record_obj); }

// A ModelOutput class `_new_record` may make: an OrderedDict whose pytree registration, the one effect of its
// __post_init__ besides the fields, is done (transformers registers each subclass when it is defined).
bool fast_record_class(py::handle cls) {
  if (!PyType_Check(cls.ptr()) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls.ptr()), &PyODict_Type))
    return false;
  PyObject* generic = PyImport_GetModule(py::str("transformers.utils.generic").ptr());  // new, or NULL
  if (!generic) {
    PyErr_Clear();
    return false;
  }
  py::object mod = py::reinterpret_steal<py::object>(generic);
  py::object done = py::getattr(mod, "_registered_model_output_types", py::none());
  if (!PySet_Check(done.ptr())) return false;
  int r = PySet_Contains(done.ptr(), cls.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

PyObject* g_untraced_call = nullptr;  // borrowed (the hook stage keeps it for the process lifetime)
py::handle write_back_fn() { return builtin_fn(&write_back_def, &write_back_obj); }

}  // namespace

void set_untraced_call(PyObject* fn) { g_untraced_call = fn; }

std::vector<graph::Node*> collect_outputs(const std::vector<ValuePtr>& values) {
  std::vector<graph::Node*> out;
  std::unordered_set<graph::Node*> seen;
  for (const auto& v : values)
    if (v) collect(v, out, seen);
  return out;
}

namespace {
bool rooted_in_locals(const guards::SourcePtr& s) {
  return s && s->root()->kind == guards::Source::Kind::Local;
}

bool reads_locals(const ValuePtr& v, std::unordered_set<const interp::Value*>& seen) {
  if (!v || !seen.insert(v.get()).second) return false;
  if (from_frame(v)) return rooted_in_locals(v->source);
  switch (v->kind) {
    case VKind::Tensor:
      return rooted_in_locals(v->source);
    case VKind::Object:
      if (made_function(v) || made_partial(v)) {
        for (const auto& c : held(v))
          if (reads_locals(c, seen)) return true;
        return false;
      }
      if (ValuePtr r = v->receiver()) return reads_locals(r, seen);
      if (const interp::PartialOf* p = v->partial()) return reads_locals(p->fn, seen);  // one of the frame's
      return rooted_in_locals(v->source);
    case VKind::Tuple:
      if (v->source) return rooted_in_locals(v->source);
      break;
    case VKind::Method:
      return reads_locals(v->bound_self(), seen);
    case VKind::Instance:
    case VKind::Record:
      if (reads_locals(v->instance().cls, seen)) return true;
      break;
    case VKind::Iter:
      for (const auto& i : v->iter().items)
        if (reads_locals(i, seen)) return true;
      return false;
    case VKind::List:
      break;
    case VKind::Dict:
      if (v->default_dict() && reads_locals(v->default_dict()->factory, seen)) return true;
      break;
    case VKind::Set:
      break;  // its tensor elements, below
    case VKind::Const:
    case VKind::Null:
    case VKind::Slice:
      return false;
    case VKind::SymNum:
      return rooted_in_locals(v->source);
    case VKind::Cell:
      return v->cell().content && reads_locals(v->cell().content, seen);
    case VKind::DictView:
      return reads_locals(v->view_of().dict, seen);
  }
  for (const auto& i : v->items)
    if (reads_locals(i, seen)) return true;
  for (const auto& k : tensor_key_values(v))
    if (reads_locals(k, seen)) return true;
  return false;
}
}  // namespace

TensorKeysScope::TensorKeysScope(const interp::Trace& t) : outer_(g_tensor_keys) { g_tensor_keys = &t.tensor_keys; }
TensorKeysScope::~TensorKeysScope() { g_tensor_keys = outer_; }

bool reads_frame_locals(const ValuePtr& v) {
  std::unordered_set<const interp::Value*> seen;
  return reads_locals(v, seen);
}

std::vector<ValuePtr> effect_values(const interp::Trace& t) {
  std::vector<ValuePtr> out;
  for (const auto& c : t.mutated) out.push_back(interp::Value::tuple(c->items));
  for (const auto& s : t.attr_stores) out.push_back(s.value);
  return out;
}

Rebuilder::Rebuilder(Emitter& e, const std::vector<graph::Node*>& outputs, int out_slot) : e_(e), out_slot_(out_slot) {
  for (size_t i = 0; i < outputs.size(); ++i) index_[outputs[i]] = static_cast<int>(i);
}

namespace {
void count_lists(const ValuePtr& v, std::unordered_map<const interp::Value*, int>& n,
                 std::vector<const interp::Value*>& order) {
  if (!v) return;
  if (bound_receiver(v)) {
    count_lists(v->receiver(), n, order);
    return;
  }
  if (v->torch_ctx()) {  // holds nothing, but is one object wherever it is reached
    if (n[v.get()]++ == 0) order.push_back(v.get());
    return;
  }
  if (!holds_values(v) || from_frame(v)) return;
  if (has_identity(v)) {
    if (n[v.get()]++ == 0) order.push_back(v.get());
    else return;  // its items were counted on first sight
  }
  for (const auto& i : held(v)) count_lists(i, n, order);
}
}  // namespace

void Rebuilder::share(const std::vector<ValuePtr>& roots) {
  std::unordered_map<const interp::Value*, int> n;
  std::vector<const interp::Value*> order;
  for (const auto& r : roots) count_lists(r, n, order);
  // Innermost first (a shared list inside a shared list is loaded, not rebuilt); `order` is outer-first.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (n[*it] < 2) continue;
    // Find the owning ValuePtr again to call push() (which recurses through items).
    for (const auto& r : roots) {
      std::vector<ValuePtr> work{r};
      ValuePtr found;
      while (!work.empty() && !found) {
        ValuePtr w = work.back();
        work.pop_back();
        if (!w) continue;
        if (w.get() == *it) found = w;
        else if (bound_receiver(w))
          work.push_back(w->receiver());
        else
          for (const auto& i : held(w)) work.push_back(i);
      }
      if (found) {
        shared_[*it] = stage(found);
        break;
      }
    }
  }
}

int Rebuilder::stage(const ValuePtr& v) {
  push(v, 0);
  int slot = e_.add_local("___tmp" + std::to_string(temps_.size()));
  e_.emit("STORE_FAST", slot);
  temps_.push_back(slot);
  return slot;
}

void Rebuilder::stage_effects(const interp::Trace& t) {
  for (const auto& c : t.mutated) {
    Effect fx;
    fx.write_back = true;
    fx.obj_slot = stage(c);  // the container itself, loaded from its source
    // Its new contents, built as a fresh list / dict / set.
    ValuePtr contents = c->kind == VKind::List ? interp::Value::list(c->items)
                        : c->kind == VKind::Dict ? interp::Value::dict(c->keys, c->items)
                                                 : interp::Value::set(c->keys);
    fx.value_slot = stage(contents);
    effects_.push_back(fx);
  }
  for (const auto& s : t.attr_stores) {
    Effect fx;
    fx.name = s.name;
    fx.value_slot = stage(s.value);
    if (s.obj) fx.obj_slot = stage(s.obj);
    effects_.push_back(fx);
  }
}

void Rebuilder::pin(const ValuePtr& v) {
  if (!v || v->kind == VKind::Null || v->kind == VKind::Const || shared_.count(v.get())) return;
  shared_[v.get()] = stage(v);
}

void Rebuilder::commit_effects() {
  for (const auto& fx : effects_) {
    if (fx.write_back) {
      e_.load_callable(write_back_fn());
      e_.emit("LOAD_FAST", fx.obj_slot);
      e_.emit("LOAD_FAST", fx.value_slot);
      e_.call(2);
      e_.emit("POP_TOP");
    } else if (fx.obj_slot < 0) {
      e_.emit("LOAD_FAST", fx.value_slot);
      e_.emit("STORE_GLOBAL", e_.name_index(fx.name));
    } else {
      e_.emit("LOAD_FAST", fx.value_slot);
      e_.emit("LOAD_FAST", fx.obj_slot);
      e_.emit("STORE_ATTR", e_.name_index(fx.name));
    }
  }
  effects_.clear();
}

void Rebuilder::set_grad_mode(bool enabled) {
  e_.load_callable(py::module_::import("torch").attr("_C").attr("_set_grad_enabled"));
  e_.load_const(py::bool_(enabled));
  e_.call(1);
  e_.emit("POP_TOP");
}

void Rebuilder::release() {
  // Emitted on each exit path; the temporaries stay known for code emitted on another path.
  for (int slot : temps_) e_.emit("DELETE_FAST", slot);
}

void Rebuilder::call_on_tuple(py::handle fn, const std::vector<ValuePtr>& items, int above) {
  e_.load_callable(fn);
  int k = 0;
  for (const auto& i : items) push(i, above + 2 + k++);  // above the NULL and the callable
  e_.emit("BUILD_TUPLE", static_cast<int>(items.size()));
  e_.call(1);
}

bool Rebuilder::push_output(graph::Node* node, int above) {
  auto it = index_.find(node);
  if (it == index_.end()) return false;
  if (out_slot_ >= 0) e_.emit("LOAD_FAST", out_slot_);
  else e_.emit("COPY", above + 1);
  e_.load_const(py::int_(it->second));
  e_.emit("BINARY_SUBSCR");
  return true;
}

void Rebuilder::push_key(const py::object& key, int above) {
  if (!guards::is_tensor(key.ptr())) {
    e_.load_const(key);
    return;
  }
  auto it = g_tensor_keys ? g_tensor_keys->find(key.ptr()) : decltype(g_tensor_keys->end()){};
  if (!g_tensor_keys || it == g_tensor_keys->end()) throw interp::Unsupported("a tensor key the trace does not know");
  push(it->second, above);
}

void Rebuilder::push_slice(const ValuePtr& v) {
  const interp::SliceOf& s = v->slice();
  py::object b[3];
  const ValuePtr* parts[3] = {&s.start, &s.stop, &s.step};
  for (int k = 0; k < 3; ++k)
    b[k] = (*parts[k])->is_sym() ? interp::plain_number((*parts[k])->sym().example) : (*parts[k])->obj;
  PyObject* sl = PySlice_New(b[0].ptr(), b[1].ptr(), b[2].ptr());  // new reference
  if (!sl) throw py::error_already_set();
  e_.load_const(py::reinterpret_steal<py::object>(sl));
}

void Rebuilder::push_object(const ValuePtr& v, int above) {
  if (const interp::TorchCtxOf* c = v->torch_ctx()) {  // a torch context made in the trace: made again
    e_.load_callable(remade_context(v->obj, c->spec->make));
    e_.call(0);
    return;
  }
  if (v->ctx_exit())  // entered again by a continuation's prologue (codegen/graph_break.cpp), never rebuilt
    throw interp::Unsupported("the __exit__ of a torch context block outside the stack slot of its block");
  if (const interp::GradExitOf* g = v->grad_exit()) {  // a traced with block's __exit__: the restorer of the mode it left
    e_.load_const(interp::grad_exit_callable(g->mode));
    return;
  }
  if (made_partial(v)) {  // functools.partial(func, *args, keyword=value, ...)
    const interp::PartialOf& p = *v->partial();
    e_.load_callable(interp::PyRefs::get().functools_partial);
    push(p.fn, above + 2);
    for (size_t i = 0; i < p.args.size(); ++i) push(p.args[i], above + 3 + static_cast<int>(i));
    py::tuple names(p.kw_names.size());
    for (size_t i = 0; i < p.kw_names.size(); ++i) {
      names[i] = p.kw_names[i];
      push(p.kw_values[i], above + 3 + static_cast<int>(p.args.size() + i));
    }
    const int n = static_cast<int>(1 + p.args.size() + p.kw_names.size());
    e_.call(n, p.kw_names.empty() ? -1 : e_.const_index(names));
    return;
  }
  if (made_function(v)) {  // _make_function(template, (cells...))
    e_.load_callable(builtin_fn(&make_function_def, &make_function_obj));
    e_.load_const(v->obj);
    int k = 0;
    for (const auto& c : v->function().closure) push(c, above + 3 + k++);
    e_.emit("BUILD_TUPLE", static_cast<int>(v->function().closure.size()));
    e_.call(2);
    return;
  }
  if (v->made_module())  // its instance is the trace's own: another one would have to be made
    throw interp::Unsupported("a torch.nn module made in the trace cannot be passed on at a graph break or returned");
  if (v->is_modelled())  // super(), functools.partial, ... modelled by the trace
    throw interp::Unsupported("a " + v->modelled_name() + " value cannot be rebuilt at a graph break yet");
  if (v->bound_self()) {  // a bound method: its receiver, then the attribute again
    push(v->bound_self(), above);
    e_.load_attr(v->bound_name());
    return;
  }
  if (v->source) e_.load_source(*v->source);
  else e_.load_const(v->obj);
}

void Rebuilder::push_record(const ValuePtr& v, int above) {
  if (fast_record_class(v->instance().cls->obj)) {  // _new_record(cls, names, *values)
    e_.load_callable(new_record_fn());
    push(v->instance().cls, above + 2);
    py::tuple names(v->keys.size());
    for (size_t i = 0; i < v->keys.size(); ++i) names[i] = v->keys[i];
    e_.load_const(names);
    for (size_t i = 0; i < v->items.size(); ++i) push(v->items[i], above + 4 + static_cast<int>(i));
    e_.call(static_cast<int>(v->items.size()) + 2);
    return;
  }
  // untraced_call(cls, field=value, ...): ModelOutput's own __init__ runs, uncaptured
  if (!g_untraced_call) throw interp::Unsupported("cannot make a ModelOutput object here");
  e_.load_callable(py::handle(g_untraced_call));
  push(v->instance().cls, above + 2);
  py::tuple names(v->keys.size());
  for (size_t i = 0; i < v->keys.size(); ++i) {
    names[i] = v->keys[i];
    push(v->items[i], above + 3 + static_cast<int>(i));
  }
  const int n = static_cast<int>(v->items.size()) + 1;
  e_.call(n, e_.const_index(names));
}

void Rebuilder::push(const ValuePtr& v, int above) {
  auto it = shared_.find(v.get());
  if (it != shared_.end()) {
    e_.emit("LOAD_FAST", it->second);
    return;
  }
  if (from_frame(v)) {
    e_.load_source(*v->source);  // the caller's own object: identity preserved
    return;
  }
  switch (v->kind) {
    case VKind::Tensor:
      if (v->source) {
        e_.load_source(*v->source);
        return;
      }
      if (!push_output(v->tensor().node, above)) throw interp::Unsupported("tensor value is not a graph output");
      return;
    case VKind::Const:
      e_.load_const(v->obj);
      return;
    case VKind::SymNum:
      if (v->source) {  // a dynamic int argument
        e_.load_source(*v->source);
        return;
      }
      // Not a graph output: its value now, guarded by the ShapeEnv (specialised).
      if (!push_output(v->sym().node, above)) e_.load_const(interp::plain_number(v->sym().example));
      return;
    case VKind::Slice:
      push_slice(v);
      return;
    case VKind::Object:
      push_object(v, above);
      return;
    case VKind::Tuple:
    case VKind::List: {
      if (v->kind == VKind::Tuple && v->source) {
        e_.load_source(*v->source);  // the caller's own tuple
        return;
      }
      if (v->kind == VKind::Tuple && v->tuple_class()) {  // a namedtuple (cls._make) or struct sequence (cls)
        call_on_tuple(interp::tuple_maker(v->tuple_class()), v->items, above);
        return;
      }
      int k = 0;
      for (const auto& i : v->items) push(i, above + k++);
      e_.emit(v->kind == VKind::Tuple ? "BUILD_TUPLE" : "BUILD_LIST", static_cast<int>(v->items.size()));
      return;
    }
    case VKind::Cell:  // _make_cell(content) / _make_cell()
      e_.load_callable(builtin_fn(&make_cell_def, &make_cell_obj));
      if (v->cell().content) push(v->cell().content, above + 2);
      e_.call(v->cell().content ? 1 : 0);
      return;
    case VKind::Instance: {  // _new_object(cls, {attrs})
      e_.load_callable(new_object_fn());
      push(v->instance().cls, above + 2);
      int k = 0;
      for (size_t i = 0; i < v->items.size(); ++i) {
        e_.load_const(v->keys[i]);
        push(v->items[i], above + 4 + k);
        k += 2;
      }
      e_.emit("BUILD_MAP", static_cast<int>(v->items.size()));
      e_.call(2);
      return;
    }
    case VKind::Record:
      push_record(v, above);
      return;
    case VKind::Null:
      e_.push_null();
      return;
    case VKind::Method:  // a method of a tensor or dict of the trace: its receiver, then the attribute
      push(v->bound_self(), above);
      e_.load_attr(v->bound_name());
      return;
    case VKind::Dict: {
      // An object's __dict__ read in the trace is that object's live dict, not a new one.
      if (v->frozen_dict()) throw interp::Unsupported("an object's __dict__ cannot be rebuilt apart from its object");
      if (v->default_dict()) {  // collections.defaultdict(factory, {keys: values})
        e_.load_callable(interp::loaded_module("collections").attr("defaultdict"));
        push(v->default_dict()->factory, above + 2);
        above += 3;  // the callable (and its NULL) and the factory lie below the map's items
      }
      int k = 0;
      for (size_t i = 0; i < v->items.size(); ++i) {
        push_key(v->keys[i], above + k);
        push(v->items[i], above + k + 1);
        k += 2;
      }
      e_.emit("BUILD_MAP", static_cast<int>(v->items.size()));
      if (v->default_dict()) e_.call(2);
      return;
    }
    case VKind::Set: {
      if (py::handle fs = v->frozenset_result()) {  // an immutable constant
        e_.load_const(py::reinterpret_borrow<py::object>(fs));
        return;
      }
      int k = 0;
      for (const auto& key : v->keys) push_key(key, above + k++);
      e_.emit("BUILD_SET", static_cast<int>(v->keys.size()));
      return;
    }
    case VKind::DictView: {  // dict.keys(d) / dict.values(d) / dict.items(d) on the rebuilt (or the frame's) dict
      const char* part = v->view_of().part == interp::ViewPart::Keys     ? "keys"
                         : v->view_of().part == interp::ViewPart::Values ? "values"
                                                                     : "items";
      e_.load_callable(py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyDict_Type)).attr(part));
      push(v->view_of().dict, above + 2);
      e_.call(1);
      return;
    }
    case VKind::Iter: {
      // An iterator over values known at trace time: iter() of a tuple of the items not yet consumed.
      if (v->iter().pos != 0) throw interp::Unsupported("cannot rebuild an iterator in the middle of a loop");
      call_on_tuple(interp::PyRefs::get().builtins.attr("iter"), v->iter().items, above);
      return;
    }
  }
}

}  // namespace cdynamo::codegen
