// value.cpp — owns construction and inspection of symbolic values.
#include "interp/value.h"

#include "guards/tensor_match.h"

namespace cdynamo::interp {

ValuePtr Value::tensor(graph::Node* n, py::object example, py::object device, SourcePtr src) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Tensor;
  v->payload = TensorOf{n, std::move(example), std::move(device)};
  v->source = std::move(src);
  return v;
}

ValuePtr Value::constant(py::object o, SourcePtr src) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Const;
  v->obj = std::move(o);
  v->source = std::move(src);
  return v;
}

ValuePtr Value::object(py::object o, SourcePtr src) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Object;
  v->obj = std::move(o);
  v->source = std::move(src);
  return v;
}

ValuePtr Value::tuple(std::vector<ValuePtr> items, py::object cls) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Tuple;
  v->items = std::move(items);
  v->payload = TupleOf{std::move(cls)};
  return v;
}

ValuePtr Value::list(std::vector<ValuePtr> items) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::List;
  v->items = std::move(items);
  v->payload = ListOf{};
  return v;
}

ValuePtr Value::iterator(std::vector<ValuePtr> items) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Iter;
  v->payload = IterOf{std::move(items), 0, {}};
  return v;
}

ValuePtr Value::new_cell(ValuePtr content) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Cell;
  v->payload = CellOf{std::move(content)};
  return v;
}

ValuePtr Value::new_instance(VKind kind, ValuePtr cls) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  v->payload = InstanceOf{std::move(cls), nullptr};
  return v;
}

ValuePtr Value::dict(std::vector<py::object> keys, std::vector<ValuePtr> values) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Dict;
  v->keys = std::move(keys);
  v->items = std::move(values);
  v->payload = DictOf{};
  return v;
}

ValuePtr Value::default_dict_of(ValuePtr factory, std::vector<py::object> keys, std::vector<ValuePtr> values) {
  ValuePtr v = dict(std::move(keys), std::move(values));
  v->dict_of().factory = std::move(factory);
  return v;
}

DictOf& Value::dict_of() {
  if (DictOf* d = kind == VKind::Dict ? std::get_if<DictOf>(&payload) : nullptr) return *d;
  throw std::logic_error("Value::dict_of() on " + describe());
}

const DictOf& Value::dict_of() const { return const_cast<Value*>(this)->dict_of(); }

py::handle Value::tuple_class() const {
  if (const TupleOf* t = kind == VKind::Tuple ? std::get_if<TupleOf>(&payload) : nullptr) return t->cls;
  throw std::logic_error("Value::tuple_class() on " + describe());
}

py::handle Value::frame_container() const {
  if (const ListOf* l = kind == VKind::List ? std::get_if<ListOf>(&payload) : nullptr) return l->real;
  if (const DictOf* d = kind == VKind::Dict ? std::get_if<DictOf>(&payload) : nullptr) return d->real;
  if (const SetOf* s = kind == VKind::Set ? std::get_if<SetOf>(&payload) : nullptr) return s->real;
  return py::handle();
}

void Value::set_frame_container(py::object real) {
  if (ListOf* l = kind == VKind::List ? std::get_if<ListOf>(&payload) : nullptr) l->real = std::move(real);
  else if (DictOf* d = kind == VKind::Dict ? std::get_if<DictOf>(&payload) : nullptr) d->real = std::move(real);
  else if (SetOf* s = kind == VKind::Set ? std::get_if<SetOf>(&payload) : nullptr) s->real = std::move(real);
  else throw std::logic_error("Value::set_frame_container() on " + describe());
}

py::handle Value::frozenset_result() const {
  const SetOf* s = kind == VKind::Set ? std::get_if<SetOf>(&payload) : nullptr;
  return s ? py::handle(s->frozenset) : py::handle();
}

ValuePtr Value::dict_view_of(ValuePtr dict, ViewPart part) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::DictView;
  v->payload = DictViewOf{std::move(dict), part};
  return v;
}

std::vector<ValuePtr> Value::view_items(const std::function<ValuePtr(const py::object&)>& key_value) const {
  const Value& d = *view_of().dict;
  std::vector<ValuePtr> out;
  for (size_t i = 0; i < d.keys.size(); ++i) {
    switch (view_of().part) {
      case ViewPart::Keys: out.push_back(key_value(d.keys[i])); break;
      case ViewPart::Values: out.push_back(d.items[i]); break;
      case ViewPart::Items: out.push_back(Value::tuple({key_value(d.keys[i]), d.items[i]})); break;
    }
  }
  return out;
}

ValuePtr Value::partial_of(py::object stand_in, PartialOf p) {
  ValuePtr v = Value::object(std::move(stand_in));
  v->payload = std::move(p);
  return v;
}

ValuePtr Value::super_value(py::object stand_in, ValuePtr cls, ValuePtr obj) {
  ValuePtr v = Value::object(std::move(stand_in));
  v->payload = SuperOf{std::move(cls), std::move(obj)};
  return v;
}

ValuePtr Value::slot_value(py::object stand_in, Slot s, ValuePtr self) {
  ValuePtr v = s == Slot::Noop ? Value::constant(std::move(stand_in)) : Value::object(std::move(stand_in));
  v->payload = SlotOf{s, std::move(self)};
  return v;
}

ValuePtr Value::traced_exception(py::object exc) {
  ValuePtr v = Value::object(std::move(exc));
  v->payload = ExceptionOf{};
  return v;
}

ValuePtr Value::grad_exit_value(py::object exit, int mode, SourcePtr src) {
  ValuePtr v = Value::object(std::move(exit), std::move(src));
  v->payload = GradExitOf{mode};
  return v;
}

ValuePtr Value::sym_num(graph::Node* n, py::object example, SourcePtr src) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::SymNum;
  v->source = std::move(src);
  v->payload = SymOf{n, std::move(example)};
  return v;
}

ValuePtr Value::slice_value(SliceOf s) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Slice;
  v->payload = std::move(s);
  return v;
}

const SliceOf& Value::slice() const {
  if (const SliceOf* s = std::get_if<SliceOf>(&payload)) return *s;
  throw std::logic_error("Value::slice() on " + describe());
}

const SymOf& Value::sym() const {
  if (const SymOf* s = std::get_if<SymOf>(&payload)) return *s;
  throw std::logic_error("Value::sym() on " + describe());
}

const TensorOf& Value::tensor() const {
  if (const TensorOf* t = kind == VKind::Tensor ? std::get_if<TensorOf>(&payload) : nullptr) return *t;
  throw std::logic_error("Value::tensor() on " + describe());
}

const DictViewOf& Value::view_of() const {
  if (const DictViewOf* d = kind == VKind::DictView ? std::get_if<DictViewOf>(&payload) : nullptr) return *d;
  throw std::logic_error("Value::view_of() on " + describe());
}

IterOf& Value::iter() {
  if (IterOf* it = kind == VKind::Iter ? std::get_if<IterOf>(&payload) : nullptr) return *it;
  throw std::logic_error("Value::iter() on " + describe());
}

const IterOf& Value::iter() const { return const_cast<Value*>(this)->iter(); }

InstanceOf& Value::instance() {
  InstanceOf* i = kind == VKind::Instance || kind == VKind::Record ? std::get_if<InstanceOf>(&payload) : nullptr;
  if (i) return *i;
  throw std::logic_error("Value::instance() on " + describe());
}

const InstanceOf& Value::instance() const { return const_cast<Value*>(this)->instance(); }

bool Value::made_in_trace() const {
  if (kind != VKind::Object) return false;
  if (std::holds_alternative<FunctionOf>(payload) || std::holds_alternative<ModuleMadeOf>(payload)) return true;
  if (const PartialOf* p = partial()) return p->made_in_trace;
  if (const SlotOf* s = slot()) return s->slot != Slot::Noop;
  return false;
}

FunctionOf& Value::function() {
  if (FunctionOf* f = kind == VKind::Object ? std::get_if<FunctionOf>(&payload) : nullptr) return *f;
  throw std::logic_error("Value::function() on " + describe());
}

const FunctionOf& Value::function() const { return const_cast<Value*>(this)->function(); }

CellOf& Value::cell() {
  if (CellOf* c = kind == VKind::Cell ? std::get_if<CellOf>(&payload) : nullptr) return *c;
  throw std::logic_error("Value::cell() on " + describe());
}

const CellOf& Value::cell() const { return const_cast<Value*>(this)->cell(); }

const char* slot_method_name(Slot s) {
  switch (s) {
    case Slot::Noop: return "__init__";
    case Slot::SuperSetattr: return "__setattr__";
    case Slot::SuperGetattribute: return "__getattribute__";
    case Slot::SuperDictGet: return "get";
    case Slot::SuperDictGetitem: return "__getitem__";
    case Slot::SuperDictContains: return "__contains__";
  }
  return "?";
}

std::string Value::modelled_name() const {
  if (std::holds_alternative<PartialOf>(payload)) return "<partial>";
  if (std::holds_alternative<SuperOf>(payload)) return "<super>";
  if (std::holds_alternative<ExceptionOf>(payload)) return "<exception>";
  if (const auto* s = std::get_if<SlotOf>(&payload)) {
    switch (s->slot) {
      case Slot::Noop: return "<noop>";
      case Slot::SuperSetattr: return "<super_setattr>";
      case Slot::SuperGetattribute: return "<super_getattribute>";
      default: return std::string("<super_dict_") + slot_method_name(s->slot) + ">";
    }
  }
  return "";
}

ValuePtr Value::receiver() const {
  if (kind != VKind::Object && kind != VKind::Method) return nullptr;
  if (const auto* s = super_of()) return s->obj;
  if (const auto* s = slot()) return s->self;
  return bound_self();
}

ValuePtr Value::set(std::vector<py::object> elements) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Set;
  v->keys = std::move(elements);
  v->payload = SetOf{};
  return v;
}

ValuePtr Value::frozenset_value(py::object fs) {
  std::vector<py::object> elements;
  for (auto e : fs) elements.push_back(py::reinterpret_borrow<py::object>(e));
  ValuePtr v = set(std::move(elements));
  std::get<SetOf>(v->payload).frozenset = std::move(fs);
  return v;
}

int Value::find_key(py::handle key) const {
  const bool tensor = guards::is_tensor(key.ptr());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].ptr() == key.ptr()) return static_cast<int>(i);
    if (tensor || guards::is_tensor(keys[i].ptr())) continue;  // a tensor hashes, so matches, by identity only
    int r = PyObject_RichCompareBool(keys[i].ptr(), key.ptr(), Py_EQ);
    if (r < 0) throw py::error_already_set();
    if (r == 1) return static_cast<int>(i);
  }
  return -1;
}

bool Value::tensor_keyed() const {
  if (kind != VKind::Dict && kind != VKind::Set) return false;
  for (const auto& k : keys)
    if (guards::is_tensor(k.ptr())) return true;
  return false;
}

ValuePtr Value::null() {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Null;
  return v;
}

ValuePtr Value::method(ValuePtr self, std::string name) {
  auto v = std::make_shared<Value>();
  v->kind = VKind::Method;
  v->payload = BoundOf{std::move(self), std::move(name)};
  return v;
}

ValuePtr Value::bound_method(py::object f, SourcePtr src, ValuePtr self, std::string name) {
  ValuePtr v = Value::object(std::move(f), std::move(src));
  v->payload = BoundOf{std::move(self), std::move(name)};
  return v;
}

const ValuePtr& Value::bound_self() const {
  static const ValuePtr none;
  const BoundOf* b = kind == VKind::Method || kind == VKind::Object ? std::get_if<BoundOf>(&payload) : nullptr;
  return b ? b->self : none;
}

const std::string& Value::bound_name() const {
  static const std::string none;
  const BoundOf* b = kind == VKind::Method || kind == VKind::Object ? std::get_if<BoundOf>(&payload) : nullptr;
  return b ? b->name : none;
}

bool Value::is_constant_like() const {
  if (kind == VKind::Const) return true;
  if (kind == VKind::Tuple || kind == VKind::List) {
    for (const auto& i : items)
      if (!i->is_constant_like()) return false;
    return true;
  }
  return false;
}

py::object Value::as_python() const {
  switch (kind) {
    case VKind::Const:
    case VKind::Object:
      return obj;
    case VKind::Tuple: {
      py::tuple t(items.size());
      for (size_t i = 0; i < items.size(); ++i) t[i] = items[i]->as_python();
      if (py::handle cls = tuple_class()) return tuple_maker(cls)(t);  // a namedtuple or struct sequence
      return t;
    }
    case VKind::List: {
      py::list l;
      for (const auto& i : items) l.append(i->as_python());
      return l;
    }
    case VKind::Dict: {
      if (tensor_keyed()) throw Unsupported("a dict keyed by a tensor as a Python value");
      py::dict d;
      for (size_t i = 0; i < keys.size(); ++i) d[keys[i]] = items[i]->as_python();
      if (const DictOf* dd = default_dict()) {  // a plain dict would change its type
        const ValuePtr& f = dd->factory;
        if ((!f->is_const() && f->kind != VKind::Object) || f->made_in_trace() || f->is_modelled())
          throw Unsupported("a defaultdict whose factory is " + f->describe() + " as a Python value");
        return py::module_::import("collections").attr("defaultdict")(f->obj, d);
      }
      return d;
    }
    case VKind::Set: {
      if (tensor_keyed()) throw Unsupported("a set of tensors as a Python value");
      py::set out;
      for (const auto& k : keys) out.add(k);
      return out;
    }
    case VKind::DictView: {
      // A view of a fresh dict with the same contents: type, order, set operations and comparisons as Python's.
      // A keys view needs only the keys (the values may be tensors).
      const Value& src = *view_of().dict;
      if (src.tensor_keyed()) throw Unsupported("a view of a dict keyed by a tensor as a Python value");
      py::dict d;
      for (size_t i = 0; i < src.keys.size(); ++i)
        d[src.keys[i]] = view_of().part == ViewPart::Keys ? py::none() : src.items[i]->as_python();
      const char* part = view_of().part == ViewPart::Keys ? "keys" : view_of().part == ViewPart::Values ? "values" : "items";
      return d.attr(part)();
    }
    default:
      throw Unsupported("value " + describe() + " has no Python value at trace time");
  }
}

namespace {

constexpr size_t kMaxDescribed = 100;  // characters of a repr kept in a break reason

std::string clipped(std::string s) {
  if (s.size() > kMaxDescribed) s = s.substr(0, kMaxDescribed - 3) + "...";
  return s;
}

std::string qualname_of(py::handle o) {
  py::object q = py::getattr(o, "__qualname__", py::none());
  if (q.is_none()) q = py::getattr(o, "__name__", py::str("?"));
  return py::str(q).cast<std::string>();
}

// A short text for a Python object in a break reason, without calling user code: a user class's __repr__
// may be slow, have side effects or raise, and an nn.Module's or a tensor container's repr can be pages long.
std::string short_repr(py::handle o) {
  PyTypeObject* type = Py_TYPE(o.ptr());
  if (PyModule_Check(o.ptr())) return "module '" + py::str(py::getattr(o, "__name__", py::str("?"))).cast<std::string>() + "'";
  if (PyType_Check(o.ptr())) return "class '" + qualname_of(o) + "'";
  if (PyFunction_Check(o.ptr())) return "function '" + qualname_of(o) + "'";
  if (PyMethod_Check(o.ptr())) {
    py::handle self = PyMethod_GET_SELF(o.ptr());  // borrowed
    std::string of = PyType_Check(self.ptr()) ? "class '" + qualname_of(self) + "'"
                                              : "a " + std::string(Py_TYPE(self.ptr())->tp_name) + " object";
    return "bound method '" + qualname_of(PyMethod_GET_FUNCTION(o.ptr())) + "' of " + of;
  }
  // Containers: their repr would call their items' (user code); their size is enough.
  if (PyTuple_Check(o.ptr()) || PyList_Check(o.ptr()) || PyDict_Check(o.ptr()) || PyAnySet_Check(o.ptr())) {
    Py_ssize_t n = PyObject_Length(o.ptr());
    if (n < 0) PyErr_Clear();
    return "<" + std::string(type->tp_name) + " with " + std::to_string(n < 0 ? 0 : n) + " items>";
  }
  bool builtin_type = !(type->tp_flags & Py_TPFLAGS_HEAPTYPE);
  if (builtin_type || type->tp_repr == PyBaseObject_Type.tp_repr) {
    PyObject* r = PyObject_Repr(o.ptr());  // new reference or NULL
    if (r) {
      std::string text = py::reinterpret_steal<py::str>(r).cast<std::string>();
      return clipped(text);
    }
    PyErr_Clear();
  }
  return "<" + std::string(type->tp_name) + " object>";
}

}  // namespace

std::string Value::describe() const {
  switch (kind) {
    case VKind::Tensor: {
      const TensorOf* t = std::get_if<TensorOf>(&payload);
      return "Tensor(" + (t && t->node ? t->node->name : std::string("?")) + ")";
    }
    case VKind::Const: return "const " + short_repr(obj);
    case VKind::Slice: return "slice with a symbolic bound";
    case VKind::SymNum: {
      const SymOf* s = std::get_if<SymOf>(&payload);
      return "symbolic " + (s && s->node ? s->node->name : std::string("?"));
    }
    case VKind::Object: return short_repr(obj);
    case VKind::Tuple:
      if (py::handle cls = tuple_class()) return "namedtuple " + py::str(cls.attr("__name__")).cast<std::string>();
      return "tuple of " + std::to_string(items.size());
    case VKind::List: return "list of " + std::to_string(items.size());
    case VKind::Null: return "NULL";
    case VKind::Method: return "method " + bound_self()->describe() + "." + bound_name();
    case VKind::Iter: {
      const IterOf* it = std::get_if<IterOf>(&payload);
      return "iterator over " + std::to_string(it ? it->items.size() : 0) + " values";
    }
    case VKind::Dict: return (default_dict() ? "defaultdict of " : "dict of ") + std::to_string(items.size());
    case VKind::Set: return "set of " + std::to_string(keys.size());
    case VKind::DictView:
      return std::string(view_of().part == ViewPart::Keys ? "dict_keys" : view_of().part == ViewPart::Values ? "dict_values"
                                                                                                    : "dict_items") +
             " of " + view_of().dict->describe();
    case VKind::Cell: return "cell";
    case VKind::Instance: return "new " + py::str(instance().cls->obj.attr("__qualname__")).cast<std::string>() + " object";
    case VKind::Record: return "new " + py::str(instance().cls->obj.attr("__qualname__")).cast<std::string>() + " output";
  }
  return "?";
}

bool is_structseq_class(py::handle cls) {
  if (!PyType_Check(cls.ptr())) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (type->tp_base != &PyTuple_Type || !py::hasattr(cls, "n_sequence_fields") || !py::hasattr(cls, "__match_args__"))
    return false;
  py::object n = cls.attr("n_fields"), seq = cls.attr("n_sequence_fields");
  return py::int_(n).cast<long>() == py::int_(seq).cast<long>() &&
         static_cast<long>(py::len(cls.attr("__match_args__"))) == py::int_(seq).cast<long>();
}

py::tuple tuple_field_names(py::handle cls) {
  if (is_structseq_class(cls)) return cls.attr("__match_args__");
  return cls.attr("_fields");
}

py::object tuple_maker(py::handle cls) {
  // A struct sequence, or torch.Size (a shape with symbolic sizes, symbolic.cpp), takes one tuple itself.
  if (is_structseq_class(cls) || !py::hasattr(cls, "_make")) return py::reinterpret_borrow<py::object>(cls);
  return cls.attr("_make");
}

bool is_typing_form(py::handle o) {
  // typing's special forms (Union, Optional, Literal, ...), its aliases (Optional[int], List[str], Literal[1]:
  // _BaseGenericAlias and subclasses) and `int | None` (types.UnionType): immutable descriptions of types,
  // made once and cached by typing. Classes held for the process lifetime (new references, never released).
  static PyObject* forms = nullptr;
  if (!forms) {
    py::module_ typing = py::module_::import("typing");
    forms = py::make_tuple(typing.attr("_SpecialForm"), typing.attr("_BaseGenericAlias"),
                           py::module_::import("types").attr("UnionType"))
                .release()
                .ptr();
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(forms); ++i)
    if (PyObject_TypeCheck(o.ptr(), reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(forms, i)))) return true;
  return false;
}

bool is_constant_object(py::handle o) {
  if (is_typing_form(o)) return true;
  if (o.is_none() || PyBool_Check(o.ptr()) || PyLong_CheckExact(o.ptr()) || PyFloat_CheckExact(o.ptr()) ||
      PyUnicode_CheckExact(o.ptr()) || PyComplex_CheckExact(o.ptr()) ||
      o.ptr() == Py_Ellipsis || PyBytes_CheckExact(o.ptr()) || PyRange_Check(o.ptr()) ||
      Py_IS_TYPE(o.ptr(), &Py_GenericAliasType))  // list[int]: an immutable annotation
    return true;
  if (PySlice_Check(o.ptr())) {  // constant when its parts are (slice(tensor(2), None) is not)
    auto* sl = reinterpret_cast<PySliceObject*>(o.ptr());
    return is_constant_object(sl->start) && is_constant_object(sl->stop) && is_constant_object(sl->step);
  }
  if (PyFrozenSet_CheckExact(o.ptr())) {  // immutable; constant when its elements are
    for (auto e : py::reinterpret_borrow<py::frozenset>(o))
      if (!is_constant_object(e)) return false;
    return true;
  }
  // inspect.Signature / Parameter (immutable by contract) and Parameter.empty (a marker class).
  static PyObject* inspect_consts = nullptr;
  static PyObject* inspect_empty = nullptr;
  if (!inspect_consts) {
    py::module_ inspect = py::module_::import("inspect");
    inspect_empty = py::object(inspect.attr("Parameter").attr("empty")).release().ptr();  // process lifetime
    inspect_consts = py::make_tuple(inspect.attr("Signature"), inspect.attr("Parameter")).release().ptr();
  }
  if (o.ptr() == inspect_empty) return true;
  if (PyObject_TypeCheck(o.ptr(), reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(inspect_consts, 0))) ||
      PyObject_TypeCheck(o.ptr(), reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(inspect_consts, 1))))
    return true;
  // torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size (a tuple of ints), torch.finfo / iinfo
  static PyObject* torch_consts = nullptr;
  if (!torch_consts) {
    py::module_ torch = py::module_::import("torch");
    // enum members too: singletons compared by identity (transformers' deprecation Action, ...).
    py::tuple t = py::make_tuple(torch.attr("dtype"), torch.attr("device"), torch.attr("layout"),
                                 torch.attr("memory_format"), torch.attr("Size"), torch.attr("finfo"),
                                 torch.attr("iinfo"),
                                 py::module_::import("enum").attr("Enum"));
    torch_consts = t.release().ptr();  // kept for the process lifetime
  }
  int r = PyObject_IsInstance(o.ptr(), torch_consts);
  if (r < 0) {
    PyErr_Clear();
    return false;
  }
  if (r == 1 && PyTuple_Check(o.ptr())) {
    // torch.Size: constant when its sizes are ints (a fake tensor's symbolic sizes are not).
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o.ptr()); ++i)
      if (!PyLong_Check(PyTuple_GET_ITEM(o.ptr(), i))) return false;
  }
  return r == 1 || is_numpy_scalar(o);
}

bool is_numpy_scalar(py::handle o) {
  static PyObject* kinds = nullptr;  // (numpy.number, numpy.bool_) once numpy is imported; process lifetime
  if (!kinds) {
    PyObject* np = PyImport_GetModule(py::str("numpy").ptr());  // new reference or NULL: numpy not imported
    if (!np) {
      PyErr_Clear();
      return false;  // no numpy scalar exists before numpy is imported
    }
    py::object mod = py::reinterpret_steal<py::object>(np);
    kinds = py::make_tuple(mod.attr("number"), mod.attr("bool_")).release().ptr();
  }
  int r = PyObject_IsInstance(o.ptr(), kinds);
  if (r < 0) PyErr_Clear();
  return r == 1 && !PyType_Check(o.ptr());
}

}  // namespace cdynamo::interp
