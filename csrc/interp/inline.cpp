// inline.cpp — owns inlining of user Python functions into the trace: argument binding (positional,
// keyword, defaults, keyword-only, *args), closures read through their cells, and the callee's frame
// state swapped in and out around a nested run of the handlers.
#include <utility>

#include "compat/compat.h"
#include "interp/skip_files.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

// Nested inlined calls (transformers: a model forward down to a config validator's try/except is over 20 deep).
constexpr int kMaxInlineDepth = 32;

std::string qualname(py::handle f) {
  py::object q = py::getattr(f, "__qualname__", py::str("?"));
  return py::str(q).cast<std::string>();
}

// Wraps element `i` of a tuple attribute of the function (its __defaults__ or __closure__) with a source
// when the function has one, so that the trace's reliance on it is guarded.
SourcePtr fn_part(const ValuePtr& fn, const char* attr, int i) {
  if (!fn->source) return nullptr;
  return guards::Source::item(guards::Source::attr(fn->source, attr), i);
}

}  // namespace

struct Tracer::InlineSteps {
  // The callee's localsplus slots bound from the call's arguments as CPython binds them: positional, *args, keywords,
  // **kwargs, defaults (read through the function's __defaults__ when it has a source, so they are guarded) and
  // keyword-only defaults (constants). Throws Unsupported where Python would raise.
  static std::vector<ValuePtr> bind_arguments(Tracer& t, const ValuePtr& fn, PyCodeObject* callee, const std::string& name,
                                              std::vector<ValuePtr>& args, Kwargs& kwargs) {
    py::handle f = fn->obj;
    const int flags = callee->co_flags;
    const int nslots = compat::code_nlocalsplus(callee);
    const int argc = callee->co_argcount, kwonly = callee->co_kwonlyargcount, posonly = callee->co_posonlyargcount;
    std::vector<ValuePtr> slots(static_cast<size_t>(nslots));
    size_t npos = std::min(args.size(), static_cast<size_t>(argc));
    for (size_t i = 0; i < npos; ++i) slots[i] = args[i];
    if (args.size() > static_cast<size_t>(argc)) {
      if (!(flags & CO_VARARGS)) t.unsupported(name + "() takes " + std::to_string(argc) + " positional arguments");
      std::vector<ValuePtr> rest(args.begin() + argc, args.end());
      slots[static_cast<size_t>(argc + kwonly)] = Value::tuple(std::move(rest));
    } else if (flags & CO_VARARGS) {
      slots[static_cast<size_t>(argc + kwonly)] = Value::tuple({});
    }
    ValuePtr extra;  // the **kwargs dict
    if (flags & CO_VARKEYWORDS) {
      extra = Value::dict({}, {});
      slots[static_cast<size_t>(argc + kwonly + ((flags & CO_VARARGS) ? 1 : 0))] = extra;
    }
    for (auto& [key, v] : kwargs) {
      int at = -1;
      for (int i = posonly; i < argc + kwonly; ++i)
        if (py::str(compat::code_localsplus_name(callee, i)).cast<std::string>() == key) at = i;
      if (at < 0 && extra) {
        extra->keys.push_back(py::str(key));
        extra->items.push_back(v);
        continue;
      }
      if (at < 0) t.unsupported(name + "() got an unexpected keyword argument '" + key + "'");
      if (slots[static_cast<size_t>(at)]) t.unsupported(name + "() got multiple values for argument '" + key + "'");
      slots[static_cast<size_t>(at)] = v;
    }
    PyObject* defaults = PyFunction_GET_DEFAULTS(f.ptr());  // borrowed tuple or NULL
    Py_ssize_t ndef = defaults ? PyTuple_GET_SIZE(defaults) : 0;
    for (int i = 0; i < argc; ++i) {
      if (slots[static_cast<size_t>(i)]) continue;
      Py_ssize_t d = i - (argc - ndef);
      if (d < 0) t.unsupported(name + "() missing a required argument");
      py::handle dv = PyTuple_GET_ITEM(defaults, d);
      SourcePtr src = fn_part(fn, "__defaults__", static_cast<int>(d));
      slots[static_cast<size_t>(i)] = src ? t.wrap(dv, src) : Value::constant(py::reinterpret_borrow<py::object>(dv));
      if (!src && !is_constant_object(dv)) t.unsupported("default of " + name + " without a source");
    }
    PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(f.ptr());  // borrowed dict or NULL
    for (int i = argc; i < argc + kwonly; ++i) {
      if (slots[static_cast<size_t>(i)]) continue;
      PyObject* key = compat::code_localsplus_name(callee, i);                     // borrowed
      PyObject* dv = kwdefaults ? PyDict_GetItemWithError(kwdefaults, key) : nullptr;  // borrowed
      if (!dv) {
        if (PyErr_Occurred()) throw py::error_already_set();
        t.unsupported(name + "() missing a keyword-only argument");
      }
      if (!is_constant_object(dv)) t.unsupported("non-constant keyword-only default of " + name);
      // Read through the function's __kwdefaults__ when it has a source (guarded: `f.__kwdefaults__['k'] = 2`
      // changes what a call binds), else a constant.
      SourcePtr src = fn->source && !fn->made_in_trace() && PyUnicode_Check(key)
                          ? guards::Source::dict_item(guards::Source::attr(fn->source, "__kwdefaults__"),
                                                      PyUnicode_AsUTF8(key))
                          : nullptr;
      slots[static_cast<size_t>(i)] =
          src ? t.wrap(dv, src) : Value::constant(py::reinterpret_borrow<py::object>(dv));
    }
    return slots;
  }

  // The callee's cell slots for its free variables: a function made in this trace shares the cells it captured; any
  // other's cell contents are read through its __closure__ (guarded), or, in torch.nn's factory-made helpers, are
  // constants. Contents are put in `slots`; the returned boxes are the shared cells.
  static std::vector<ValuePtr> bind_closure(Tracer& t, const ValuePtr& fn, PyCodeObject* callee, const std::string& name,
                                            bool nn_library, std::vector<ValuePtr>& slots,
                                            std::vector<ValuePtr>& real_cells) {
    py::handle f = fn->obj;
    const int nslots = compat::code_nlocalsplus(callee);
    std::vector<ValuePtr> boxes(static_cast<size_t>(nslots));
    PyObject* closure = PyFunction_GET_CLOSURE(f.ptr());  // borrowed tuple or NULL
    int nfree = static_cast<int>(callee->co_nfreevars);
    for (int k = 0; k < nfree; ++k) {
      int slot = nslots - nfree + k;
      if (fn->made_in_trace()) {  // a function made in this trace: the cells it captured
        const std::vector<ValuePtr>& cells = fn->function().closure;
        if (static_cast<size_t>(k) >= cells.size()) t.unsupported("closure of " + name + " is incomplete");
        boxes[static_cast<size_t>(slot)] = cells[static_cast<size_t>(k)];
        continue;
      }
      SourcePtr src = fn_part(fn, "__closure__", k);
      PyObject* cell = closure ? PyTuple_GET_ITEM(closure, k) : nullptr;  // borrowed
      PyObject* content = cell ? PyCell_GET(cell) : nullptr;               // borrowed, may be NULL
      if (!src && nn_library && content && is_constant_object(content)) {
        // torch.nn's helpers made by factories (_pair = _ntuple(2)): constants of the program, as its globals are.
        slots[static_cast<size_t>(slot)] = Value::constant(py::reinterpret_borrow<py::object>(content));
        continue;
      }
      if (!src || !closure) t.unsupported("closure of " + name + " without a source");
      // The cell itself, where a `nonlocal` assignment goes (an attribute store this trace may already hold).
      if (real_cells.empty()) real_cells.resize(static_cast<size_t>(nslots));
      ValuePtr box = Value::object(py::reinterpret_borrow<py::object>(cell), src);
      real_cells[static_cast<size_t>(slot)] = box;
      if (ValuePtr stored = t.pending_attr(box, "cell_contents")) slots[static_cast<size_t>(slot)] = stored;
      else if (content) slots[static_cast<size_t>(slot)] = t.wrap(content, guards::Source::attr(src, "cell_contents"));
    }

    return boxes;
  }
};

ValuePtr Tracer::inline_call(const ValuePtr& fn, std::vector<ValuePtr> args,
                             std::vector<std::pair<std::string, ValuePtr>> kwargs) {
  py::handle f = fn->obj;
  auto* callee = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(f.ptr()));  // borrowed
  std::string name = qualname(f);
  int flags = callee->co_flags;
  // A generator expression made in the trace runs to completion at the call; what it yields becomes an
  // iterator value (its consumer, sum() / any() / a loop, follows at once). Other generators are not inlined.
  bool genexpr = (flags & CO_GENERATOR) && fn->made_in_trace() && name.size() >= 9 &&
                 name.compare(name.size() - 9, 9, "<genexpr>") == 0;
  if ((flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) && !genexpr)
    unsupported("call to generator/coroutine function " + name);
  if (marked_constant_result(f)) return call_constant_result(fn, args, kwargs);
  if (ValuePtr r = mapping_mixin_call(f, args, kwargs)) return r;
  if (ValuePtr r = deepcopy_call(f, args, kwargs)) return r;
  if (ValuePtr r = grad_decorated_call(fn, args, kwargs)) return r;
  if (ValuePtr r = optimizer_init_group(fn, args, kwargs)) return r;  // torch.optim (optimizer.cpp)
  if (args.size() == 2 && kwargs.empty() && name == "cast") {
    // typing.cast(type, value) returns value unchanged (torch.optim's wrappers cast `self`).
    PyObject* mod = PyFunction_GET_MODULE(f.ptr());  // borrowed, may be NULL
    if (mod && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "typing") == 0) return args[1];
  }
  if (is_skipped_code(callee) || is_skipped_function(f.ptr()))
    unsupported("call to " + name + ", marked skip or disable: it runs as Python");
  if (function_marked(f.ptr(), "__script_if_tracing_wrapper")) {
    // torch.jit.script_if_tracing's wrapper calls the function itself when no torch.jit trace runs (frames under
    // one are never captured): that function is inlined, read through the wrapper's __original_fn.
    py::object orig = f.attr("__original_fn");
    ValuePtr inner = fn->source ? wrap(orig, guards::Source::attr(fn->source, "__original_fn")) : Value::object(orig);
    if (inner->kind != VKind::Object || !PyFunction_Check(inner->obj.ptr())) unsupported("script_if_tracing of " + name);
    return inline_call(inner, std::move(args), std::move(kwargs));
  }
  if (is_nonrecursive_wrapper(callee))
    unsupported("call to " + name + ", marked disable(recursive=False): it runs as Python");
  std::vector<ValuePtr> yielded;
  // torch.nn's module code (forward methods and their helpers) is inlined like user code; its module
  // globals are program constants, as attributes of torch modules are (see is_trusted_module).
  bool nn_library = is_torch_nn_module_file(callee);
  if (is_library_file(callee) && !nn_library && !is_inlinable_library_file(callee))
    unsupported("call to library function " + name + " (not inlined)");
  PyObject* callee_globals = PyFunction_GET_GLOBALS(f.ptr());  // borrowed
  if (inline_depth_ >= kMaxInlineDepth) unsupported("inlining depth limit reached at " + name);
  // The code that runs is the function's __code__, which `f.__code__ = g.__code__` replaces without changing the
  // function's identity (its ID_MATCH): guarded as well, as torch._dynamo guards an inlined function's code.
  // torch.nn's own functions are program constants (as their globals are).
  if (fn->source && !fn->made_in_trace() && !nn_library)
    guards.add(guards::id_match(guards::Source::attr(fn->source, "__code__"), reinterpret_cast<PyObject*>(callee)));

  // --- bind arguments to the callee's localsplus slots ---
  const int nslots = compat::code_nlocalsplus(callee);
  std::vector<ValuePtr> slots = InlineSteps::bind_arguments(*this, fn, callee, name, args, kwargs);
  std::vector<ValuePtr> real_cells;
  std::vector<ValuePtr> boxes = InlineSteps::bind_closure(*this, fn, callee, name, nn_library, slots, real_cells);

  // --- the callee's Frame swapped in whole, run, and the caller's swapped back ---
  Frame callee_frame;
  callee_frame.code = callee;
  callee_frame.fv = fv;
  if (callee_globals != fv.globals) {
    // Another module's function: torch.nn's globals are program constants; any other module's globals are read
    // through sources on that module's dict (guarded).
    callee_frame.fv.globals = callee_globals;
    PyObject* b = PyDict_GetItemString(callee_globals, "__builtins__");  // borrowed
    if (b && PyModule_Check(b)) b = PyModule_GetDict(b);               // borrowed
    if (b) callee_frame.fv.builtins = b;
  }
  callee_frame.trusted_globals_ = nn_library;
  callee_frame.bc = bytecode::decode(callee);
  callee_frame.locals = std::move(slots);
  callee_frame.local_loaded.assign(static_cast<size_t>(nslots), 1);  // an inlined frame never reads a real frame
  callee_frame.cell_boxes = std::move(boxes);
  callee_frame.real_cells_ = std::move(real_cells);
  callee_frame.yields = genexpr ? &yielded : nullptr;
  call_enters_with_.push_back(pc + 1 < bc.insts.size() && bytecode::opname(bc.insts[pc + 1]->opcode) == std::string("BEFORE_WITH"));
  Frame caller = std::exchange(running_frame(), std::move(callee_frame));
  graph::Graph::CallSave outer_call{};  // the caller's place in the inline stack (node meta), set below
  auto restore = [&] {
    graph.leave_call(std::move(outer_call));
    running_frame() = std::move(caller);
    call_enters_with_.pop_back();
    --inline_depth_;
  };
  ++inline_depth_;
  outer_call = graph.enter_call();  // the callee's nodes list the calling instruction's frame first
  try {
    run_nested();
    ValuePtr result = return_value;
    if (genexpr) {
      result = Value::iterator(std::move(yielded));
    }
    restore();
    return result;
  } catch (const TracedRaise& e) {
    // The exception leaves the callee; the caller's call instruction must not be under a handler.
    restore();
    // In an inlined caller, its run loop finds the handler (run_nested); the traced frame's own handlers are
    // not entered by the trace.
    if (inline_depth_ == 0 && in_handler_range(pc))
      throw Unsupported(std::string(e.what()) + " (under an exception handler of " + qualname(f) + "'s caller)");
    throw;
  } catch (const Unsupported& e) {
    int line = lineno_;
    std::string file = py::str(callee->co_filename).cast<std::string>();
    restore();
    std::string reason = "call to " + name + " could not be inlined: " + e.what() + " (at " + file + ":" +
                         std::to_string(line) + ")";
    stop.reason = reason;
    throw Unsupported(reason);
  } catch (...) {
    restore();
    throw;
  }
}

void Tracer::run_nested() {
  while (!stopped) {
    try {
      execute_one();
    } catch (const TracedRaise& e) {
      if (!enter_exception_handler(e)) throw;
    }
  }
}

}  // namespace cdynamo::interp
