// torch_rules.cpp — owns the allow/deny lists for torch functions, tensor methods and tensor attributes.
#include "interp/torch_rules.h"

#include <unordered_map>
#include <unordered_set>

#include "guards/tensor_match.h"
#include "interp/tracer.h"
#include "interp/services.h"

namespace cdynamo::interp {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::string str_attr(py::handle o, const char* name) {
  PyObject* a = PyObject_GetAttrString(o.ptr(), name);  // new
  if (!a) {
    PyErr_Clear();
    return "";
  }
  std::string out;
  if (PyUnicode_Check(a)) {
    const char* s = PyUnicode_AsUTF8(a);  // borrowed buffer of a
    if (s) out = s;
  }
  Py_DECREF(a);
  PyErr_Clear();
  return out;
}

const std::unordered_set<std::string>& blocked_torch_modules() {
  static const std::unordered_set<std::string> s = {
      "torch._dynamo", "torch.compiler", "torch._inductor", "torch.fx", "torch.jit", "torch.utils",
      "torch.serialization", "torch.random", "torch.cuda", "torch.backends", "torch.distributed",
      "torch.testing", "torch.autograd", "torch.overrides", "torch.hub", "torch.onnx", "torch.export",
      "torch.package", "torch.multiprocessing", "torch.profiler", "torch._C._autograd", "torch.storage",
      "torch._tensor_str", "torch.optim", "torch.nn.modules", "torch.nn.parameter", "torch.nn.init",
      "torch._higher_order_ops", "torch._subclasses", "torch._prims", "torch._refs", "torch._ops"};
  return s;
}

const std::unordered_set<std::string>& blocked_torch_names() {
  static const std::unordered_set<std::string> s = {
      "set_grad_enabled", "manual_seed", "seed", "initial_seed", "set_default_dtype", "get_default_dtype",
      "set_default_device", "get_default_device", "set_printoptions", "save", "load", "set_num_threads",
      "get_num_threads", "set_rng_state", "get_rng_state", "use_deterministic_algorithms", "is_grad_enabled",
      "compile", "set_flush_denormal", "set_anomaly_enabled", "from_numpy", "frombuffer", "cond", "vmap",
      "is_inference_mode_enabled", "set_warn_always", "is_warn_always_enabled", "typename", "is_storage",
      "set_default_tensor_type", "set_autocast_enabled", "is_autocast_enabled", "_assert", "Generator",
      "autocast", "no_grad", "enable_grad", "inference_mode", "is_nonzero", "equal", "allclose", "tolist",
      "item", "numel_", "empty_cache", "synchronize", "as_strided_", "sym_int", "sym_float", "sym_max", "sym_min",
      "sym_not", "sym_ite", "sym_sum", "broadcast_shapes", "chunk_", "register_hook"};
  return s;
}

const std::unordered_set<std::string>& factory_names() {
  static const std::unordered_set<std::string> s = {
      "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "range", "linspace",
      "logspace", "eye", "tensor", "as_tensor", "scalar_tensor", "empty_strided", "normal", "bartlett_window",
      "hann_window", "hamming_window", "blackman_window", "kaiser_window", "tril_indices", "triu_indices"};
  return s;
}

const std::unordered_set<std::string>& metadata_torch_names() {
  static const std::unordered_set<std::string> s = {"numel", "is_tensor", "is_floating_point", "is_complex",
                                                     "result_type", "promote_types", "can_cast"};
  return s;
}

const std::unordered_set<std::string>& pure_builtins() {
  static const std::unordered_set<std::string> s = {
      "len", "isinstance", "issubclass", "abs", "min", "max", "round", "int", "float", "bool", "str", "tuple",
      "list", "sum", "any", "all", "type", "callable", "divmod", "pow", "sorted", "repr", "hash", "ord", "chr",
      "complex", "hex", "oct", "bin", "format", "range", "slice"};
  return s;
}

}  // namespace

std::string callable_name(py::handle fn) {
  std::string mod = str_attr(fn, "__module__");
  std::string name = str_attr(fn, "__qualname__");
  if (name.empty()) name = str_attr(fn, "__name__");
  if (name.empty()) return py::repr(fn).cast<std::string>();
  if (mod.empty() || mod == "builtins") return name;
  return mod + "." + name;
}

bool is_trusted_module(py::handle mod) {
  std::string name = str_attr(mod, "__name__");
  return name == "torch" || starts_with(name, "torch.") || name == "math" || name == "operator" ||
         name == "_operator";
}

bool is_stdlib_module(py::handle mod) {
  static PyObject* names = py::object(loaded_module("sys").attr("stdlib_module_names")).release().ptr();  // process lifetime
  std::string name = str_attr(mod, "__name__");
  py::str top(name.substr(0, name.find('.')));
  int r = PySet_Contains(names, top.ptr());
  if (r < 0) throw py::error_already_set();
  return r == 1;
}

namespace {

// The classification memo, by identity. An entry must not keep the callable alive (a module or function
// made per call would never die) nor outlive it (its id could be reused): it holds a weak reference whose
// callback drops the entry, or a strong one only for objects that live as long as their module (builtin
// functions of modules and classes, which cannot be weakly referenced). Other callables are not memoized.
struct ClassifyEntry {
  py::object ref;  // a weakref to the callable, or the callable itself
  CallKind kind;
};
std::unordered_map<PyObject*, ClassifyEntry>* g_classified = new std::unordered_map<PyObject*, ClassifyEntry>();
std::unordered_map<PyObject*, PyObject*>* g_weak_keys = new std::unordered_map<PyObject*, PyObject*>();  // weakref -> key

PyObject* forget_classified(PyObject*, PyObject* weakref) {  // weakref callback: its callable died
  auto it = g_weak_keys->find(weakref);
  if (it != g_weak_keys->end()) {
    g_classified->erase(it->second);
    g_weak_keys->erase(it);
  }
  Py_RETURN_NONE;
}
PyMethodDef forget_def = {"_cdynamo_forget_classified", forget_classified, METH_O, "Drops a dead callable's memo."};

void remember_kind(py::handle fn, CallKind kind) {
  static PyObject* callback = PyCFunction_New(&forget_def, nullptr);  // process lifetime
  if (!callback) {
    PyErr_Clear();
    return;
  }
  PyObject* wr = PyWeakref_NewRef(fn.ptr(), callback);  // new reference, or NULL when not weakly referencable
  if (wr) {
    (*g_weak_keys)[wr] = fn.ptr();
    (*g_classified)[fn.ptr()] = {py::reinterpret_steal<py::object>(wr), kind};
    return;
  }
  PyErr_Clear();
  if (PyCFunction_Check(fn.ptr())) {
    PyObject* self = PyCFunction_GET_SELF(fn.ptr());  // borrowed
    if (!self || PyModule_Check(self) || PyType_Check(self))
      (*g_classified)[fn.ptr()] = {py::reinterpret_borrow<py::object>(fn), kind};
  }
}

}  // namespace

void clear_classification_cache() {
  g_weak_keys->clear();
  auto old = std::move(*g_classified);  // weakrefs die after the maps are consistent (their callbacks are gone)
  g_classified->clear();
}

bool is_op_overload(py::handle fn) {
  static PyObject* packet = py::object(loaded_module("torch._ops").attr("OpOverloadPacket")).release().ptr();
  static PyObject* overload = py::object(loaded_module("torch._ops").attr("OpOverload")).release().ptr();
  auto* t = reinterpret_cast<PyObject*>(Py_TYPE(fn.ptr()));
  return t == packet || t == overload;
}

namespace {

// numpy.float64, numpy.int64, numpy.bool_, ...: subclasses of numpy.number or numpy.bool_ (numpy is imported: `fn` is
// one of its classes).
bool is_numpy_scalar_type(py::handle fn) {
  if (!PyType_Check(fn.ptr())) return false;
  py::object np = loaded_module("numpy");
  for (const char* base : {"number", "bool_"}) {
    int r = PyObject_IsSubclass(fn.ptr(), np.attr(base).ptr());
    if (r < 0) throw py::error_already_set();
    if (r == 1) return true;
  }
  return false;
}

}  // namespace

CallKind classify_callable(py::handle fn) {
  auto* cache = g_classified;
  // allow_in_graph / disallow_in_graph registrations can change: check them before the cache.
  try {
    const Services& s = services();
    py::object key = py::int_(reinterpret_cast<uintptr_t>(fn.ptr()));
    if (s.disallowed_ids.contains(key)) return CallKind::Disallowed;
    if (s.allowed_ids.contains(key)) return CallKind::AllowedInGraph;
    if (s.graph_break.ptr() == fn.ptr()) return CallKind::GraphBreak;
  } catch (py::error_already_set&) {
  }
  auto it = cache->find(fn.ptr());
  if (it != cache->end()) return it->second.kind;

  CallKind kind = CallKind::Unknown;
  std::string mod = str_attr(fn, "__module__");
  std::string name = str_attr(fn, "__name__");
  bool is_class = PyType_Check(fn.ptr());
  bool c_function = !is_class && PyCFunction_Check(fn.ptr());
  if (c_function && mod == "torch" && name == "is_grad_enabled") {
    kind = CallKind::GradModeQuery;
  } else if (c_function && mod == "torch" && (name == "is_autocast_enabled" || name == "is_autocast_cpu_enabled")) {
    kind = CallKind::AutocastQuery;
  } else if (c_function && mod == "torch._C" && starts_with(name, "_has_torch_function")) {
    kind = CallKind::TorchFunctionQuery;
  } else if (!is_class && mod == "torch.utils._python_dispatch" && name == "_get_current_dispatch_mode_stack") {
    kind = CallKind::DispatchModeStackQuery;  // torch.nn's _is_make_fx_tracing() (MultiheadAttention, torch 2.11)
  } else if (c_function && mod == "torch._C" && name == "_get_tracing_state") {
    // None while no torch.jit trace runs, and frames under a torch.jit trace are never captured.
    kind = CallKind::PureBuiltin;
  } else if (is_class && mod == "torch" && (name == "finfo" || name == "iinfo")) {
    kind = CallKind::PureBuiltin;  // torch.finfo(dtype): an immutable record of the dtype's limits
  } else if (!is_class && is_op_overload(fn)) {
    // torch.ops.<namespace>.<op>[.<overload>] (aten or a torch.library custom op): a graph op; its meta kernel
    // (a custom op's register_fake) gives the example values.
    kind = CallKind::TorchOp;
  } else if (!is_class && mod == "torch" && name == "_assert") {
    kind = CallKind::TorchAssert;
  } else if (!is_class && !name.empty() && (mod == "torch" || starts_with(mod, "torch."))) {
    // (An object of a torch class, a WeightNorm hook, has the class's __module__ but no __name__: not an op.)
    // Private torch functions are not graph ops, except the fused kernels torch.nn's fast paths call.
    static const std::unordered_set<std::string> private_ops = {"_transformer_encoder_layer_fwd",
                                                                "_native_multi_head_attention", "_weight_norm"};
    // torch._foreach_* (lists of tensors in, lists out or in place): graph ops, as torch.optim's foreach paths use them.
    bool foreach_op = mod == "torch" && starts_with(name, "_foreach_");
    bool blocked = blocked_torch_names().count(name) > 0 ||
                   (!name.empty() && name[0] == '_' && !private_ops.count(name) && !foreach_op);
    for (const auto& p : blocked_torch_modules())
      if (mod == p || starts_with(mod, p + ".")) blocked = true;
    // Queries whose answer is fixed in eager Python (scripting, tracing, compiling): folded.
    static const std::unordered_set<std::string> eager_constants = {
        "is_scripting", "is_tracing", "is_compiling", "is_dynamo_compiling", "is_exporting"};
    // Facts about the process that do not change while it runs (as torch._dynamo, folded unguarded).
    static const std::unordered_set<std::string> process_constants = {
        "torch.cuda.is_available", "torch.cuda.device_count", "torch.distributed.is_available",
        // Checked by every entry's GLOBAL_STATE guard.
        "torch.are_deterministic_algorithms_enabled",
        // False whenever a compiled frame runs: frames under a torch.jit trace (TorchScript ONNX export) run as Python,
        // and fx symbolic tracing passes Proxies, which fail the tensor guards (torch._dynamo folds both too).
        "torch.onnx.is_in_onnx_export", "torch.fx._symbolic_trace.is_fx_tracing"};
    if (name == "is_compiling" || name == "is_dynamo_compiling") {
      kind = CallKind::CompilingQuery;  // libraries take their compile-friendly paths, as under torch.compile
    } else if (mod == "torch.jit" && name == "annotate") {
      kind = CallKind::JitAnnotate;
    } else if (mod == "torch.jit._script" && name == "_unwrap_optional") {
      kind = CallKind::JitUnwrapOptional;
    } else if (mod == "torch.jit" && name == "isinstance") {
      kind = CallKind::JitIsinstance;
    } else if (eager_constants.count(name) || process_constants.count(mod + "." + name)) {
      kind = CallKind::PureBuiltin;
    } else if (!blocked) {
      if (factory_names().count(name)) kind = CallKind::TorchFactory;
      else if (metadata_torch_names().count(name)) kind = CallKind::TorchMetadata;
      else kind = CallKind::TorchOp;
    }
  } else if (is_class && mod == "numpy" && is_numpy_scalar_type(fn)) {
    kind = CallKind::PureBuiltin;  // numpy.float64(2.5), numpy.int64(3): immutable scalars, folded on constants
  } else if (!is_class && (mod == "_operator" || mod == "operator")) {
    kind = CallKind::Operator;
  } else if (!is_class && mod == "math") {
    kind = CallKind::PureBuiltin;
  } else if (!is_class && mod == "typing" && (name == "get_origin" || name == "get_args")) {
    // Pure functions of a typing form (folded only on constants: typing forms, classes, None).
    py::object real = loaded_module("typing").attr(name.c_str());
    if (real.ptr() == fn.ptr()) kind = CallKind::PureBuiltin;
  } else if (mod == "builtins" && pure_builtins().count(name)) {
    // Only the real builtins (not a shadowing object with the same name).
    py::object real = loaded_module("builtins").attr(name.c_str());
    if (real.ptr() == fn.ptr()) kind = CallKind::PureBuiltin;
  }
  remember_kind(fn, kind);
  return kind;
}

bool tensor_method_allowed(const std::string& name) {
  static const std::unordered_set<std::string> blocked = {
      "tolist", "item", "numpy", "data_ptr", "storage", "untyped_storage", "backward", "register_hook",
      "register_post_accumulate_grad_hook", "share_memory_", "pin_memory", "record_stream", "cuda", "type",
      "retain_grad", "requires_grad_", "set_", "resize_", "resize_as_", "apply_", "map_", "map2_", "is_pinned",
      "is_shared", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__iter__", "__repr__",
      "__str__", "__format__", "__array__", "__reduce_ex__", "__setstate__", "__deepcopy__", "__hash__",
      "__dlpack__", "__dlpack_device__", "cpu", "to_sparse", "nonzero_static", "storage_type", "dim_order",
      "__contains__", "__setitem__", "__delitem__", "__getstate__", "__reversed__", "__len__", "tolist",
      "_is_view", "is_set_to", "new_tensor", "module_load", "coalesce"};
  if (blocked.count(name)) return false;
  if (name.size() > 1 && name[0] == '_') {
    // Arithmetic dunders are fine (x.__add__(y)); other private methods are not.
    static const std::unordered_set<std::string> dunders = {
        "__add__", "__radd__", "__iadd__", "__sub__", "__rsub__", "__isub__", "__mul__", "__rmul__", "__imul__",
        "__truediv__", "__rtruediv__", "__itruediv__", "__matmul__", "__rmatmul__", "__pow__", "__rpow__",
        "__neg__", "__abs__", "__getitem__", "__and__", "__or__", "__xor__", "__lt__", "__le__", "__gt__",
        "__ge__", "__eq__", "__ne__", "__floordiv__", "__rfloordiv__", "__mod__", "__invert__", "__pos__"};
    return dunders.count(name) > 0;
  }
  return true;
}

bool tensor_method_metadata(const std::string& name) {
  static const std::unordered_set<std::string> s = {
      "size", "dim", "ndimension", "numel", "nelement", "stride", "is_contiguous", "is_floating_point",
      "is_complex", "element_size", "get_device", "is_signed", "storage_offset", "is_inference"};
  return s.count(name) > 0;
}

ValuePtr Tracer::tensor_attr(Tracer& t, const ValuePtr& self, const std::string& name) {
  static const std::unordered_set<std::string> const_attrs = {"shape", "dtype", "ndim", "layout",
                                                              "requires_grad", "is_sparse", "is_quantized",
                                                              "is_mkldnn", "is_complex", "itemsize", "nbytes", "is_nested"};
  static const std::unordered_set<std::string> node_attrs = {"T", "mT", "H", "mH", "real", "imag"};
  py::object ex = self->tensor().example;
  if (const_attrs.count(name)) {
    py::object r = ex.attr(name.c_str());
    if (name == "shape") return t.metadata_value(self, name, {}, r);  // symbolic sizes in a dynamic trace
    if (!is_constant_object(r)) t.unsupported("tensor attribute '" + name + "' is symbolic");
    return Value::constant(r);
  }
  if (name == "device") return Value::constant(self->tensor().device);
  if (name == "is_cuda" || name == "is_cpu" || name == "is_meta") {
    std::string type = self->tensor().device.attr("type").cast<std::string>();
    return Value::constant(py::bool_(type == name.substr(3)));
  }
  if (node_attrs.count(name) || name == "data") {
    // `.data` is not detach(): it shares the storage but has its own version counter, so an in-place op
    // through it (`w.data.mul_(0.9)`) does not invalidate what autograd saved of `w`. The graph calls the
    // function the attribute runs, torch._C._autograd._get_data_attr. Held for the process's lifetime
    // (a new reference never released: no destructor runs at interpreter exit).
    static PyObject* get_data_attr = [] {
      py::object f = loaded_module("torch").attr("_C").attr("_autograd").attr("_get_data_attr");
      return f.release().ptr();
    }();
    py::object result;
    try {
      result = name == "data" ? py::handle(get_data_attr)(ex) : ex.attr(name.c_str());
    } catch (py::error_already_set& e) {
      t.unsupported("tensor attribute '" + name + "' failed during tracing: " + e.what());
    }
    auto& refs = PyRefs::get();
    graph::Node* n =
        name == "data"
            ? t.graph.call_function(py::reinterpret_borrow<py::object>(get_data_attr), {t.to_arg(self)}, {}, result)
            : t.graph.call_function(refs.getattr_fn, {t.to_arg(self), graph::Arg::constant(py::str(name))}, {}, result);
    return t.wrap_result(n, result, self->tensor().device);
  }
  // Methods: bound lazily and called through CALL.
  PyObject* cls_attr = PyObject_GetAttrString(PyRefs::get().tensor_type.ptr(), name.c_str());  // new
  if (!cls_attr) {
    PyErr_Clear();
    t.unsupported("tensor has no attribute '" + name + "'");
  }
  bool callable = PyCallable_Check(cls_attr) && !PyObject_TypeCheck(cls_attr, &PyProperty_Type) &&
                  std::string(Py_TYPE(cls_attr)->tp_name) != "getset_descriptor";
  Py_DECREF(cls_attr);
  if (callable) {
    // Disallowed methods are refused when called (CALL), where a graph break can be placed.
    return Value::method(self, name);
  }
  t.unsupported("tensor attribute '" + name + "' depends on run-time state");
}

}  // namespace cdynamo::interp
