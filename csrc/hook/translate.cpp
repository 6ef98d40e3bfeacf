// translate.cpp — owns the compile path of one frame: trace, guards, graph to the backend, codegen, entry,
// and the reports to the Python callback (graphs, bytecode, guards, recompiles, fallbacks).
#include <memory>
#include <pybind11/stl.h>

#include <chrono>
#include <unordered_set>

#include "codegen/codegen.h"
#include "codegen/resume_info.h"
#include "interp/skip_files.h"
#include "hook/eval_frame.h"
#include "hook/graph_call.h"
#include "hook/state.h"
#include "guards/shape_guard.h"

namespace cdynamo::hook {

namespace py = pybind11;

namespace {

// Indices of the graph inputs read from an nn.Module's `_parameters` / `_buffers` dict (its parameters and buffers):
// the inputs torch._dynamo marks static (node meta `tensor_dict['_dynamo_static_input_type']`), so inductor's CUDA
// graphs read them in place instead of copying them into the graph's memory on every call.
py::list module_tensor_inputs(const interp::Tracer& t) {
  using K = guards::Source::Kind;
  py::list out;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const guards::Source* s = t.inputs[i].source.get();
    if (!s || s->kind != K::DictItem || !s->base) continue;
    const guards::Source& dict = *s->base;
    if ((dict.kind == K::Attr || dict.kind == K::GenericAttr) && (dict.name == "_parameters" || dict.name == "_buffers"))
      out.append(i);
  }
  return out;
}

// The graph inputs read through the frame's objects (a source with a base: self._modules['fc']._parameters['weight'])
// are handed to the graph call by the guard check that fetched them (GuardSet::check_inputs) instead of being loaded
// again by the rewritten code: marks them in t.lifted_inputs and returns the GraphCall's plan (graph_call.h).
std::vector<int32_t> lift_inputs(interp::Tracer& t) {
  std::vector<int32_t> plan;
  t.lifted_inputs.assign(t.inputs.size(), 0);
  int32_t k = 0;
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const guards::Source* s = t.inputs[i].source.get();
    bool lift = s && s->base;
    t.lifted_inputs[i] = lift ? 1 : 0;
    plan.push_back(lift ? k++ : -1);
  }
  if (k == 0) {
    plan.clear();
    t.lifted_inputs.clear();
  }
  return plan;
}

// The sources of the lifted inputs, in order (GuardSet::set_input_sources).
std::vector<guards::SourcePtr> lifted_sources(const interp::Tracer& t) {
  std::vector<guards::SourcePtr> out;
  for (size_t i = 0; i < t.lifted_inputs.size(); ++i)
    if (t.lifted_inputs[i]) out.push_back(t.inputs[i].source);
  return out;
}

int g_compiled_counter = 0;
int g_resume_counter = 0;

py::dict base_info(PyCodeObject* code) {
  py::dict info;
  info["co_name"] = py::reinterpret_borrow<py::object>(code->co_name);
  info["co_filename"] = py::reinterpret_borrow<py::object>(code->co_filename);
  info["co_firstlineno"] = code->co_firstlineno;
  info["code"] = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(code));
  return info;
}

int recompile_limit() {
  try {
    return interp::loaded_module("cdynamo.config").attr("recompile_limit").cast<int>();
  } catch (py::error_already_set&) {
    return 8;
  } catch (py::cast_error&) {
    return 8;
  }
}

// The callback's boolean attribute `name`, or `missing` when it has none (or it cannot be read).
bool flag(PyObject* cb, const char* name, bool missing) {
  PyObject* v = PyObject_GetAttrString(cb, name);  // new reference, or NULL
  if (!v) {
    PyErr_Clear();
    return missing;
  }
  int r = PyObject_IsTrue(v);
  Py_DECREF(v);
  if (r < 0) {
    PyErr_Clear();
    return missing;
  }
  return r == 1;
}

bool nopython(PyObject* cb) { return flag(cb, "nopython", false); }

// False for a BaseException that is not an Exception (KeyboardInterrupt, SystemExit, GeneratorExit): those
// propagate to the user as under torch.compile, never turned into a fallback.
bool is_exception(const py::error_already_set& err) {
  return PyErr_GivenExceptionMatches(err.type().ptr(), PyExc_Exception) != 0;
}

// Raises cdynamo.exc.Unsupported(message) as the current Python error.
void raise_unsupported(const std::string& message) {
  try {
    py::object exc = interp::loaded_module("cdynamo.exc").attr("Unsupported");
    PyErr_SetString(exc.ptr(), message.c_str());
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

// Raises cdynamo.exc.InternalError naming the frame (a bug of cdynamo met under nopython/fullgraph, where
// running the frame as Python is not an option); `cause` (may be null) becomes its __cause__.
void raise_internal(PyCodeObject* code, std::string what, py::error_already_set* cause) {
  size_t at = what.find("\n\nAt:");  // pybind11's traceback listing: the cause carries the traceback itself
  if (at != std::string::npos) what.resize(at);
  try {
    py::object exc = interp::loaded_module("cdynamo.exc").attr("InternalError");
    py::object err = exc("cdynamo internal error while compiling " + py::str(code->co_name).cast<std::string>() + " (" +
                         py::str(code->co_filename).cast<std::string>() + ":" + std::to_string(code->co_firstlineno) +
                         "): " + what);
    if (cause) {
      cause->restore();  // the original exception object, normalized
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyErr_NormalizeException(&type, &value, &tb);
      if (tb) PyException_SetTraceback(value, tb);
      PyException_SetCause(err.ptr(), value);  // steals value
      Py_XDECREF(type);
      Py_XDECREF(tb);
    }
    PyErr_SetObject(exc.ptr(), err.ptr());
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

// config.suppress_errors: a backend failure runs the frame as Python instead of raising BackendCompilerFailed.
bool suppress_errors() {
  try {
    return interp::loaded_module("cdynamo.config").attr("suppress_errors").cast<bool>();
  } catch (py::error_already_set&) {
    return false;
  } catch (py::cast_error&) {
    return false;
  }
}

std::string located(const interp::StopInfo& s) {
  std::string msg = s.reason + "\n  at " + s.filename + ":" + std::to_string(s.lineno);
  if (!s.line.empty()) msg += "\n    " + s.line;
  return msg;
}

void report(PyObject* cb, const char* method, py::dict info) {
  try {
    py::handle(cb).attr(method)(info);
  } catch (py::error_already_set& e) {
    // A failing report must not break the user's program.
    // (With warnings turned into errors the warning cannot be shown: it is dropped, not left set.)
    if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "cdynamo: callback %s failed: %s", method, e.what()) < 0)
      PyErr_Clear();
  }
}

// Tells the callback the frame runs as plain Python: kind is unsupported/internal/backend/recompile_limit.
void report_fallback(PyObject* cb, PyCodeObject* code, const char* kind, const std::string& reason) {
  py::dict info = base_info(code);
  info["reason"] = reason;
  info["kind"] = kind;
  report(cb, "on_fallback", info);
}

std::shared_ptr<CacheEntry> add_entry(CodeExtra* extra, compat::Frame* frame, guards::GuardSet guards,
                                      PyObject* cb) {
  auto e = std::make_shared<CacheEntry>();
  e->callback = py::reinterpret_borrow<py::object>(cb);
  PyObject* backend = PyObject_GetAttrString(cb, "backend");  // new reference
  if (backend) e->backend = py::reinterpret_steal<py::object>(backend);
  else PyErr_Clear();
  e->guards = std::move(guards);
  e->globals = py::reinterpret_borrow<py::object>(compat::frame_globals(frame));
  e->nargs = compat::code_total_args(compat::frame_code(frame));
  static uint64_t serial = 0;
  e->serial = ++serial;
  // First, as the most recently used, unless another call walks the list by index now (eval_frame.cpp's find_entry).
  if (extra->pins <= 1) extra->entries.insert(extra->entries.begin(), e);
  else extra->entries.push_back(e);
  return e;
}

void add_state_guards(interp::Tracer& t) {
  t.guards.add(guards::grad_mode_guard());
  t.guards.add(guards::default_dtype_guard());
  t.guards.add(guards::autocast_guard());
  t.guards.add(guards::global_state_guard());
  std::vector<guards::SourcePtr> tensors;
  std::vector<PyObject*> values;  // borrowed: the inputs hold them
  for (const auto& in : t.inputs) {
    if (!guards::is_tensor(in.value.ptr())) continue;  // a dynamic int argument
    tensors.push_back(in.source);
    values.push_back(in.value.ptr());
  }
  if (tensors.size() > 1) {
    // Distinct objects whose storages are distinct too, or, when some inputs view one storage now
    // (x and x[0]), exactly that overlap: a change of aliasing recompiles.
    std::vector<int> groups = guards::storage_groups(values);
    bool distinct = true;
    for (size_t i = 0; i < groups.size(); ++i) distinct = distinct && groups[i] == static_cast<int>(i);
    if (!distinct) t.guards.add(guards::storage_overlap(tensors, values));
    t.guards.add(guards::no_aliasing(std::move(tensors), distinct));
  }
  // Containers the trace changed were modelled as distinct objects: they must still be distinct.
  if (!t.mutated.empty() && t.frame_containers.size() > 1) {
    std::vector<guards::SourcePtr> containers;
    for (const auto& kv : t.frame_containers) containers.push_back(kv.second->source);
    t.guards.add(guards::no_aliasing(std::move(containers)));
  }
}

// Dynamic shapes: the guards of a trace with fake tensors, made once the graph is compiled (the backend may add
// to the ShapeEnv): per tensor input a TENSOR_MATCH that leaves its symbolic sizes / strides out, and one
// SHAPE_ENV guard over the sizes for everything the ShapeEnv decided (cdynamo._dynamic.TraceShapes.guard_spec).
void add_shape_guards(interp::Tracer& t) {
  py::list inputs;
  for (const auto& in : t.inputs) inputs.append(py::make_tuple(interp::shape_source_name(*in.source), in.node->example_value));
  py::tuple spec = t.shapes.attr("guard_spec")(inputs);
  py::list slots = spec[0], masks = spec[4];
  for (size_t i = 0; i < t.inputs.size(); ++i) {
    const auto& in = t.inputs[i];
    if (!guards::is_tensor(in.value.ptr())) continue;
    py::tuple m = masks[i];
    t.guards.add(guards::tensor_match(in.source, in.value.ptr(), m[0].cast<uint64_t>(), m[1].cast<uint64_t>()));
  }
  py::list exprs = spec[1];
  if (exprs.empty() && spec[2].is_none()) return;
  std::vector<guards::ShapeSlot> shape_slots;
  for (py::handle item : slots) {
    py::tuple sl = py::reinterpret_borrow<py::tuple>(item);
    guards::ShapeSlot slot;
    slot.source = t.inputs[sl[0].cast<size_t>()].source;
    std::string kind = sl[1].cast<std::string>();
    slot.kind = kind == "size"     ? guards::ShapeSlot::Kind::Size
                : kind == "stride" ? guards::ShapeSlot::Kind::Stride
                : kind == "offset" ? guards::ShapeSlot::Kind::StorageOffset
                                   : guards::ShapeSlot::Kind::Int;
    slot.dim = sl[2].cast<int>();
    shape_slots.push_back(std::move(slot));
  }
  std::vector<std::string> texts;
  for (py::handle tx : py::list(spec[3])) texts.push_back(py::str(tx).cast<std::string>());
  t.guards.add(guards::shape_guard(std::move(shape_slots), exprs.ptr(), spec[2].ptr(), std::move(texts)));
}

// Names put into a frame's globals (borrowed dict) for a new entry; removed again if the entry is not made.
struct Injected {
  PyObject* globals;
  std::vector<std::string> names;
  ~Injected() {
    for (const auto& n : names)
      if (PyDict_DelItemString(globals, n.c_str()) < 0) PyErr_Clear();
  }
};

// One break reason as the Python side reads it: reason, filename, lineno, line.
py::dict break_info(const interp::StopInfo& s) {
  py::dict b;
  b["reason"] = s.reason;
  b["filename"] = s.filename;
  b["lineno"] = s.lineno;
  b["line"] = s.line;
  return b;
}

py::list guard_strings(const guards::GuardSet& g) {
  py::list out;
  for (const auto& s : g.describe()) out.append(py::str(s));
  return out;
}

}  // namespace

bool skip_by_file(PyCodeObject* code) { return interp::is_library_file(code); }

namespace {
std::shared_ptr<CacheEntry> translate_impl(compat::Frame* frame, PyObject* cb, CodeExtra* extra, bool ops_in_try);
}

std::shared_ptr<CacheEntry> translate(compat::Frame* frame, PyObject* cb, CodeExtra* extra) {
  return translate_impl(frame, cb, extra, true);
}

namespace {
// `ops_in_try`: tensor operations inside the frame's try blocks may go into the graph (traced again
// without, when the graph could not fail cleanly).
std::shared_ptr<CacheEntry> translate_impl(compat::Frame* frame, PyObject* cb, CodeExtra* extra, bool ops_in_try) {
  PyCodeObject* code = compat::frame_code(frame);
  auto t0 = std::chrono::steady_clock::now();
  bool strict = nopython(cb);
  const bool text = flag(cb, "wants_text", true);  // printouts for logs and explain, else skipped
  const bool meta = flag(cb, "wants_node_meta", true);  // node meta for the backend, export and explain
  try {
    drop_dead_entries(extra);  // objects they were compiled for died: they free a recompile slot
    // ... unless that happens on (nearly) every call: a frame compiled for objects made anew on each call
    // would be traced again on every call. Past 4x the recompile limit of such drops it runs as Python.
    if (extra->entries.empty() && extra->dead_drops >= 4 * recompile_limit()) {
      if (strict) {
        raise_unsupported("recompile limit reached for " + py::str(code->co_name).cast<std::string>() + ": " +
                          std::to_string(extra->dead_drops) +
                          " compiles for objects that died after the call; last guard failure: " +
                          extra->last_failure);
        return nullptr;
      }
      py::dict info = base_info(code);
      info["reason"] = std::to_string(extra->dead_drops) +
                       " compiles for objects that died after the call (an object made anew on each call is "
                       "guarded by identity); the frame runs as Python from now on";
      info["kind"] = "recompile_limit";
      report(cb, "on_fallback", info);
      extra->skip = true;
      return nullptr;
    }
    if (!extra->entries.empty()) {
      int limit = recompile_limit();
      if (static_cast<int>(extra->entries.size()) >= limit) {
        if (strict) {
          raise_unsupported("recompile limit (" + std::to_string(limit) + ") reached for " +
                            py::str(code->co_name).cast<std::string>() + "; last guard failure: " +
                            extra->last_failure);
          return nullptr;
        }
        if (!extra->had_graph) {
          // Nothing was ever captured here (e.g. a generated namedtuple __new__ that breaks at once):
          // stop re-tracing it quietly; running it as Python loses nothing.
          extra->skip = true;
          return nullptr;
        }
        if (!extra->warned) {
          extra->warned = true;
          py::dict info = base_info(code);
          info["reason"] = "recompile limit (" + std::to_string(limit) + ") reached; last guard failure: " +
                           extra->last_failure;
          info["kind"] = "recompile_limit";
          report(cb, "on_fallback", info);
        }
        return nullptr;
      }
      // Why did the newest entry not match? (reported as the recompile reason)
      std::string why;
      newest_entry(extra)->guards.check(frame_view(frame), &why);
      extra->last_failure = why;
      py::dict info = base_info(code);
      info["reason"] = why;
      report(cb, "on_recompile", info);
    }

    guards::FrameView fv = frame_view(frame);
    if (guards::torch_function_mode_active()) {
      // Torch functions dispatch to the mode, which a graph would skip: plain Python while a mode is
      // active (the global-state guard fails once it is gone, and the code compiles then).
      std::shared_ptr<CacheEntry> e = add_entry(extra, frame, guards::GuardSet(), cb);
      e->guards.add(guards::grad_mode_guard());
      e->guards.add(guards::global_state_guard());
      e->description = "a TorchFunctionMode is active";
      report_fallback(cb, code, "unsupported", "a TorchFunctionMode is active: the frame runs as Python");
      return e;
    }
    const codegen::ResumeInfo* ri = codegen::resume_info(code);
    if (ri) {
      extra->continuation = true;
      if (continuation_too_deep(PyThreadState_Get())) {
        // Not remembered: a later call from a shallower stack compiles it.
        report_fallback(cb, code, "unsupported",
                        "graph breaks nested too deep (each continues in a new frame): the rest of the "
                        "function runs as Python near the recursion limit");
        return nullptr;
      }
    }
    // Dynamic shapes: a trace starts with fake tensors when an earlier compile found a dynamic input (or under
    // compile(dynamic=True)); a static trace that meets one now is run again with them.
    py::object cb_dynamic = py::getattr(py::handle(cb), "dynamic", py::none());
    py::handle dynamic_mod = interp::dynamic_module();
    bool fake_trace = dynamic_mod.attr("frame_is_dynamic")(py::handle(reinterpret_cast<PyObject*>(code)), cb_dynamic)
                          .cast<bool>();
    auto make_tracer = [&](int break_at, const std::string& reason) {
      auto tracer = std::make_unique<interp::Tracer>(code, fv);
      tracer->cb_dynamic = cb_dynamic;
      if (fake_trace)
        tracer->shapes = dynamic_mod.attr("TraceShapes")(py::handle(reinterpret_cast<PyObject*>(code)), cb_dynamic);
      tracer->allow_ops_in_try = ops_in_try;
      if (ri) {
        tracer->owned_free = ri->owned_free;
        tracer->window_end = ri->tail_cut;
      }
      tracer->break_at = break_at;
      tracer->break_at_reason = reason;
      return tracer;
    };
    std::unique_ptr<interp::Tracer> tracer = make_tracer(-1, "");
    auto status = tracer->run();
    if (tracer->restart_dynamic) {
      fake_trace = true;
      tracer = make_tracer(-1, "");
      status = tracer->run();
    }
    if (status == interp::Tracer::Status::Break && tracer->failed_guards > 0 && !strict) {
      // The breaking instruction guarded what it read before failing: trace again, breaking there at once.
      const int at = static_cast<int>(tracer->pc);
      const std::string reason = tracer->stop_info().reason;
      tracer = make_tracer(at, reason);
      status = tracer->run();
    }
    interp::Tracer& t = *tracer;
    if (t.user_error) {  // raised to the caller, as torch._dynamo raises it
      py::tuple e = t.user_error;
      py::object type = e[0], value = e[1], tb = e[2];
      // PyErr_Restore steals the three references (release()); a None traceback is passed as NULL.
      PyErr_Restore(type.release().ptr(), value.release().ptr(), tb.is_none() ? nullptr : tb.release().ptr());
      return nullptr;
    }
    if (status == interp::Tracer::Status::Unsupported) {
      const auto& stop = t.stop_info();
      if (strict && t.internal_error) {
        raise_internal(code, located(stop), nullptr);
        return nullptr;
      }
      if (strict) {
        raise_unsupported(located(stop) +
                          "\nHint: remove the construct from the compiled region, or compile without "
                          "nopython/fullgraph to let it run as Python.");
        return nullptr;
      }
      py::dict info = base_info(code);
      info["reason"] = located(stop);
      info["kind"] = "unsupported";
      py::list breaks;
      breaks.append(break_info(stop));
      info["break_reasons"] = breaks;
      report(cb, "on_fallback", info);
      add_state_guards(t);
      std::shared_ptr<CacheEntry> e = add_entry(extra, frame, std::move(t.guards), cb);
      e->description = "unsupported: " + stop.reason;
      return e;
    }
    bool is_break = status == interp::Tracer::Status::Break;
    const auto& stop = t.stop_info();
    if (is_break && strict) {
      raise_unsupported(located(stop) +
                        "\nHint: this is a graph break; remove the construct from the compiled region, or compile "
                        "without nopython/fullgraph to let it run as Python.");
      return nullptr;
    }
    add_state_guards(t);
    bool has_graph = t.graph.op_count() > 0;
    if (!is_break && !has_graph) {
      // Nothing for a graph (no tensor operation on the whole path): the code is not worth guarding and
      // re-tracing on every new input, as torch._dynamo skips such frames; it runs as plain Python.
      extra->skip = true;
      return nullptr;
    }
    std::vector<interp::ValuePtr> values =
        is_break ? codegen::break_values(t) : std::vector<interp::ValuePtr>{t.return_value};
    for (const auto& v : codegen::effect_values(t)) values.push_back(v);  // tensors stored by side effects
    std::vector<graph::Node*> outs;
    std::string name;
    py::object graph_call;
    if (has_graph) {
      outs = codegen::collect_outputs(values);
      std::vector<graph::Arg> out_args;
      for (auto* n : outs) out_args.push_back(graph::Arg::ref(n));
      t.graph.output(graph::Arg::tuple(std::move(out_args)));
      t.graph.verify();
      // "_c": never one of torch._dynamo's names (__compiled_fn_<n>, __resume_at_<offset>_<n>), which it
      // injects into the same module globals when both compile functions of one module.
      name = "__compiled_fn_c" + std::to_string(g_compiled_counter++);
      py::object root = interp::loaded_module("torch.nn").attr("Module")();
      for (const auto& [attr, value] : t.graph_attrs) root.attr("register_buffer")(attr, value);
      py::object gm = t.graph.to_fx(root, "GraphModule", meta);
      py::list example_inputs;  // the real inputs; with dynamic shapes their fake examples, as torch.compile's
      for (const auto& in : t.inputs) example_inputs.append(t.dynamic() ? in.node->example_value : in.value);
      py::dict ginfo = base_info(code);
      ginfo["name"] = name;
      if (text) {
        ginfo["graph_tabular"] = t.graph.tabular();
        ginfo["graph_readable"] = t.graph.readable();
      }
      ginfo["op_count"] = t.graph.op_count();
      ginfo["static_inputs"] = module_tensor_inputs(t);
      // Read before the backend runs (it may rewrite the module): what a failed call of this graph changes.
      py::object graph_call_py = interp::loaded_module("cdynamo._graph_call");
      py::tuple policy = graph_call_py.attr("error_policy")(gm, codegen::Rebuilder::has_effects(t));
      if (t.ops_in_try && static_cast<GraphErrorPolicy>(policy[0].cast<int>()) != GraphErrorPolicy::Clean)
        return translate_impl(frame, cb, extra, false);  // its failure could skip a handler: keep them out
      py::object compiled;
      try {
        compiled = py::handle(cb).attr("compile_graph")(gm, example_inputs, ginfo);
      } catch (py::error_already_set& err) {
        // BackendCompilerFailed reaches the caller, as under torch.compile, unless config.suppress_errors (then
        // the frame runs as Python, with one warning). KeyboardInterrupt, SystemExit: always the user's.
        if (strict || !is_exception(err) || !suppress_errors()) {
          err.restore();
          return nullptr;
        }
        report_fallback(cb, code, "backend", std::string("backend failed: ") + err.what());
        std::shared_ptr<CacheEntry> e = add_entry(extra, frame, std::move(t.guards), cb);
        e->description = "backend failed";
        return e;
      }
      GraphCallHooks hooks;
      auto opt = [](py::handle h) { return h.is_none() ? nullptr : h.ptr(); };
      hooks.rng_save = opt(policy[1]);
      hooks.rng_restore = opt(policy[2]);
      if ((hooks.snap_mask = opt(policy[3]))) {
        hooks.snap_save = graph_call_py.attr("save_inputs").ptr();      // borrowed: module attributes
        hooks.snap_restore = graph_call_py.attr("restore_inputs").ptr();
      }
      hooks.plan = lift_inputs(t);
      PyObject* call = make_graph_call(compiled.ptr(), static_cast<GraphErrorPolicy>(policy[0].cast<int>()),
                                       hooks);  // new reference
      if (!call) throw py::error_already_set();
      graph_call = py::reinterpret_steal<py::object>(call);
    }
    py::object new_code;
    std::vector<codegen::Resume> resumes;
    try {
      if (is_break) {
        codegen::BreakCode bcode = codegen::graph_break(t, name, outs, g_resume_counter);
        new_code = bcode.code;
        resumes = std::move(bcode.resumes);
      } else {
        new_code = codegen::straight_line(t, name, outs);
      }
    } catch (const interp::Unsupported& u) {
      // The state at the break cannot be rebuilt as Python: the whole frame runs as Python.
      report_fallback(cb, code, "unsupported", std::string(u.what()) + " (at a graph break: " + located(stop) + ")");
      std::shared_ptr<CacheEntry> e = add_entry(extra, frame, std::move(t.guards), cb);
      e->description = "unsupported";
      return e;
    }
    ensure_extra(reinterpret_cast<PyCodeObject*>(new_code.ptr()))->generated = true;
    PyObject* globals = compat::frame_globals(frame);
    Injected injected{globals};
    if (has_graph) {
      if (PyDict_SetItemString(globals, name.c_str(), graph_call.ptr()) < 0) throw py::error_already_set();
      injected.names.push_back(name);
    }
    py::list resume_listing;
    for (const auto& r : resumes) {
      if (text)
        resume_listing.append(py::make_tuple(r.name, bytecode::format(reinterpret_cast<PyCodeObject*>(r.code.ptr()))));
      if (r.closure) continue;  // made by the rewritten frame from its cells, not published
      PyObject* fn = PyFunction_New(r.code.ptr(), globals);  // new reference
      if (!fn) throw py::error_already_set();
      int rc = PyDict_SetItemString(globals, r.name.c_str(), fn);
      Py_DECREF(fn);
      if (rc < 0) throw py::error_already_set();
      injected.names.push_back(r.name);
    }

    if (has_graph) extra->had_graph = true;
    if (t.dynamic()) add_shape_guards(t);
    if (has_graph) t.guards.set_input_sources(lifted_sources(t));
    py::list guard_list = text ? guard_strings(t.guards) : py::list();
    std::string guard_tree = text ? t.guards.tree_text() : std::string();
    std::shared_ptr<CacheEntry> e = add_entry(extra, frame, std::move(t.guards), cb);
    e->code = new_code;
    if (has_graph) e->graph = graph_call;
    e->injected = std::move(injected.names);
    injected.names.clear();  // owned by the entry now
    e->description = is_break ? "graph break" : "graph " + name;

    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    py::dict info = base_info(code);
    if (text) {
      info["original_bytecode"] = bytecode::format(code);
      info["modified_bytecode"] = bytecode::format(reinterpret_cast<PyCodeObject*>(new_code.ptr()));
    }
    info["guards"] = guard_list;
    info["guard_tree"] = guard_tree;
    info["graph_count"] = has_graph ? 1 : 0;
    info["compile_time_s"] = secs;
    py::list breaks;
    if (is_break) {
      breaks.append(break_info(stop));
    }
    info["break_reasons"] = breaks;
    info["resume_bytecode"] = resume_listing;
    report(cb, "on_compiled", info);
    return e;
  } catch (py::error_already_set& err) {
    if (!is_exception(err) ||
        interp::is_user_error(err.value())) {
      err.restore();
      return nullptr;
    }
    if (strict) {
      raise_internal(code, err.what(), &err);
      return nullptr;
    }
    report_fallback(cb, code, "internal", std::string("internal error: ") + err.what());
  } catch (const std::exception& err) {
    if (strict) {
      raise_internal(code, err.what(), nullptr);
      return nullptr;
    }
    try {
      report_fallback(cb, code, "internal", std::string("internal error: ") + err.what());
    } catch (...) {
      PyErr_Clear();
    }
  }
  PyErr_Clear();
  extra->skip = true;  // an internal failure is not retried on every call
  return nullptr;
}

}  // namespace

}  // namespace cdynamo::hook
