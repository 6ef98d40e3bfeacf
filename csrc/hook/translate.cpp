// translate.cpp — owns the compile path of one frame: trace, guards, graph to the backend, codegen, entry,
// and the reports to the Python callback (graphs, bytecode, guards, recompiles, fallbacks).
#include <memory>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <unordered_set>

#include "codegen/codegen.h"
#include "codegen/resume_info.h"
#include "interp/services.h"
#include "guards/tensor_match.h"
#include "interp/tracer.h"
#include "interp/skip_files.h"
#include "hook/eval_frame.h"
#include "hook/graph_call.h"
#include "hook/shape_guard_spec.h"
#include "hook/state.h"
#include "guards/shape_guard.h"

namespace cdynamo::hook {

namespace py = pybind11;

namespace {

// Indices of the graph inputs read from an nn.Module's `_parameters` / `_buffers` dict (its parameters and buffers):
// the inputs torch._dynamo marks static (node meta `tensor_dict['_dynamo_static_input_type']`), so inductor's CUDA
// graphs read them in place instead of copying them into the graph's memory on every call.
py::list module_tensor_inputs(const interp::Trace& t) {
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

// The Python `random` draws of the trace's graph inputs (RandomValue sources, in draw order) as one
// cdynamo._random_values.Draws (its first draw saves the generators' states), or None when the graph draws none.
py::object random_draws(const interp::Trace& t) {
  py::list makes;
  for (const auto& in : t.inputs)
    if (in.source && in.source->kind == guards::Source::Kind::RandomValue)
      makes.append(py::reinterpret_borrow<py::object>(in.source->owner));
  if (makes.empty()) return py::none();
  return interp::services().random_values().attr("draws_of")(makes);
}

// The graph inputs read through the frame's objects (a source with a base: self._modules['fc']._parameters['weight'])
// are handed to the graph call by the guard check that fetched them (GuardSet::check_inputs) instead of being loaded
// again by the rewritten code: marks them in t.lifted_inputs and returns the GraphCall's plan (graph_call.h).
std::vector<int32_t> lift_inputs(interp::Trace& t) {
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
std::vector<guards::SourcePtr> lifted_sources(const interp::Trace& t) {
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

int config_int(const char* name, int missing) {
  try {
    return interp::services().config.attr(name).cast<int>();
  } catch (py::error_already_set&) {
    return missing;
  } catch (py::cast_error&) {
    return missing;
  }
}

int recompile_limit() { return config_int("recompile_limit", 8); }

// Whether `e` was compiled for the nn.Modules this frame's locals hold now, for each local that is a module the
// entry pins by identity (an ID_MATCH on the local itself), and for the frame's `self` module, pinned or not.
// torch._dynamo's rule for ID-matched locals: the recompile limit counts only those entries, so every instance of a
// module class runs its own compiled forward (FSDP2 calls each block's forward as a frame of its own) while one
// instance that keeps failing guards still stops at the limit; accumulated_recompile_limit bounds all entries of
// the code. cdynamo applies it to `self` also where the entry does not pin it (modules are guarded by type and
// structure, so blocks share entries): blocks that each need their own entry (GPT-2's attention reads its
// `layer_idx`) each get the limit, where torch._dynamo stops compiling after 8 of them. Other pinned objects (a plain
// object made anew on every call) keep counting against one limit.
bool same_pinned_locals(const CacheEntry& e, const guards::FrameView& fv) {
  if (e.compiled_for_self && fv.localsplus[0] && fv.localsplus[0] != e.compiled_for_self &&
      interp::PyRefs::get().is_module_instance(fv.localsplus[0]))
    return false;
  for (const guards::Guard& g : e.guards.guards()) {
    const guards::Source* s = g.source.get();
    if (g.kind != guards::GuardKind::IdMatch || !s || s->kind != guards::Source::Kind::Local || s->base) continue;
    PyObject* now = fv.localsplus[s->index];  // borrowed
    if (!now || !interp::PyRefs::get().is_module_instance(now)) continue;
    if (now != g.identity().object) return false;  // identities only: the object may be weakly held
  }
  return true;
}

// The entries that count against the recompile limit for this frame (same_pinned_locals).
int entries_for_frame(const CodeExtra* extra, compat::Frame* frame) {
  guards::FrameView fv = frame_view(frame);
  int n = 0;
  for (const auto& e : extra->entries) n += same_pinned_locals(*e, fv) ? 1 : 0;
  return n;
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
    PyErr_SetString(interp::services().unsupported_error.ptr(), message.c_str());
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
    py::handle exc = interp::services().internal_error;
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
    return interp::services().config.attr("suppress_errors").cast<bool>();
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
  if (e->nargs > 0) {
    PyObject* self = frame_view(frame).localsplus[0];  // borrowed
    if (self && interp::PyRefs::get().is_module_instance(self)) e->compiled_for_self = self;
  }
  static uint64_t serial = 0;
  e->serial = ++serial;
  // First, as the most recently used, unless another call walks the list by index now (eval_frame.cpp's find_entry).
  if (extra->pins <= 1) extra->entries.insert(extra->entries.begin(), e);
  else extra->entries.push_back(e);
  return e;
}

void add_state_guards(interp::Trace& t) {
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
  for (const auto& in : t.trace().inputs)
    inputs.append(py::make_tuple(interp::shape_source_name(*in.source), in.node->example_value));
  const auto& ins = t.trace().inputs;
  ShapeGuardSpec spec = read_guard_spec(t.options().shapes.attr("guard_spec")(inputs), ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!guards::is_tensor(ins[i].value.ptr())) continue;
    const InputMask& m = spec.masks[i];
    t.trace().guards.add(guards::tensor_match(ins[i].source, ins[i].value.ptr(), m.sizes, m.strides));
  }
  if (py::len(spec.programs) == 0 && spec.fallback.is_none()) return;
  std::vector<guards::ShapeSlot> shape_slots;
  for (const SlotSpec& s : spec.slots) shape_slots.push_back(guards::ShapeSlot{ins[s.input].source, s.kind, s.dim});
  t.trace().guards.add(guards::shape_guard(std::move(shape_slots), spec.programs.ptr(), spec.fallback.ptr(),
                                           std::move(spec.texts)));
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
std::shared_ptr<CacheEntry> translate_impl(compat::Frame* frame, PyObject* cb, CodeExtra* extra);
}

std::shared_ptr<CacheEntry> translate(compat::Frame* frame, PyObject* cb, CodeExtra* extra) {
  return translate_impl(frame, cb, extra);
}

namespace {

using EntryPtr = std::shared_ptr<CacheEntry>;

void mark_read(const graph::Arg& a, std::unordered_set<const graph::Node*>* read) {
  if (a.kind == graph::Arg::Kind::NodeRef) read->insert(a.node);
  for (const graph::Arg& item : a.items) mark_read(item, read);
}

// The graph's call nodes, less the item() of a placeholder that no node reads (a float argument's conversion,
// Tracer::wrap_dynamic_scalar): a frame whose only call is that conversion has nothing to compile, as in
// torch._dynamo (a dynamic float handed to print() and nothing else).
int live_op_count(const graph::Graph& g) {
  std::unordered_set<const graph::Node*> read;
  for (const auto& n : g.nodes()) {
    for (const graph::Arg& a : n->args) mark_read(a, &read);
    for (const auto& kv : n->kwargs) mark_read(kv.second, &read);
  }
  int count = 0;
  for (const auto& n : g.nodes()) {
    if (n->op != graph::OpKind::CallFunction && n->op != graph::OpKind::CallMethod && n->op != graph::OpKind::CallModule)
      continue;
    bool unread_input_item = n->op == graph::OpKind::CallMethod && PyUnicode_Check(n->target.ptr()) &&
                             PyUnicode_CompareWithASCIIString(n->target.ptr(), "item") == 0 && n->args.size() == 1 &&
                             n->args[0].kind == graph::Arg::Kind::NodeRef &&
                             n->args[0].node->op == graph::OpKind::Placeholder && !read.count(n.get());
    if (!unread_input_item) ++count;
  }
  return count;
}

// What an attempt at the frame traces with. Only accept_restart changes it, one honoured restart request at a time.
struct TracePlan {
  bool fake = false;             // fake tensors under a ShapeEnv (else meta examples)
  int break_at = -1;             // TraceOptions::break_at
  std::string break_at_reason;
  bool ops_in_try = true;        // tensor operations inside the frame's try blocks may go into the graph
  int restarts = 0;              // requests honoured so far
  py::list honoured;             // their kinds (restart_kind_name), reported with the compile ("restarts")
};
// Each kind is honoured at most once per plan (BreakAt once more after NoOpsInTry clears it): 4 restarts at most.
constexpr int kMaxRestarts = 4;

// One compile of a frame, run as explicit stages by translate_impl: admit (recompile limit, an active
// TorchFunctionMode, continuation depth), then attempts under a TracePlan until one is not restarted: trace, decide
// (user errors, unsupported frames, nopython, nothing to compile), compile the graph (the backend), emit code
// (straight line or graph break), publish (globals, cache entry, report). A stage that ends the compile returns the
// result (an entry, or nullptr: run as Python / raise the error set); std::nullopt goes on to the next stage, or
// with `restarting` set, to the next attempt.
struct FrameCompile {
  compat::Frame* frame;
  PyObject* cb;
  CodeExtra* extra;
  TracePlan plan;
  bool restarting = false;  // the attempt's request was honoured (accept_restart): plan changed, trace again
  PyCodeObject* code;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  bool strict, text, meta;
  const codegen::ResumeInfo* ri = nullptr;
  std::unique_ptr<interp::Tracer> tracer;
  interp::Tracer::Status status = interp::Tracer::Status::Running;
  // The graph stage's results (of the current attempt: cleared as each attempt starts).
  std::vector<graph::Node*> outs;
  std::string name;
  py::object graph_call;
  void start_attempt() {
    restarting = false;
    status = interp::Tracer::Status::Running;
    outs.clear();
    name.clear();
    graph_call = py::object();
  }

  FrameCompile(compat::Frame* f, PyObject* c, CodeExtra* x)
      : frame(f), cb(c), extra(x), code(compat::frame_code(f)), strict(nopython(c)),
        text(flag(c, "wants_text", true)),   // printouts for logs and explain, else skipped
        meta(flag(c, "wants_node_meta", true)) {}  // node meta for the backend, export and explain
  interp::Tracer& t() { return *tracer; }
  bool is_break() const { return status == interp::Tracer::Status::Break; }
  bool has_graph() const { return live_op_count(tracer->trace().graph) > 0; }
  EntryPtr entry(std::string description) {
    EntryPtr e = add_entry(extra, frame, std::move(tracer->trace().guards), cb);
    e->description = std::move(description);
    return e;
  }
};

// Past the recompile limit (or after too many compiles for objects that died): no new trace.
std::optional<EntryPtr> admit_recompile(FrameCompile& c) {
  CodeExtra* extra = c.extra;
  drop_dead_entries(extra);  // objects they were compiled for died: they free a recompile slot
  // ... unless that happens on (nearly) every call: a frame compiled for objects made anew on each call would be
  // traced again on every call. Past 4x the recompile limit of such drops it runs as Python.
  if (extra->entries.empty() && extra->dead_drops >= 4 * recompile_limit()) {
    if (c.strict) {
      raise_unsupported("recompile limit reached for " + py::str(c.code->co_name).cast<std::string>() + ": " +
                        std::to_string(extra->dead_drops) +
                        " compiles for objects that died after the call; last guard failure: " + extra->last_failure);
      return nullptr;
    }
    py::dict info = base_info(c.code);
    info["reason"] = std::to_string(extra->dead_drops) +
                     " compiles for objects that died after the call (an object made anew on each call is "
                     "guarded by identity); the frame runs as Python from now on";
    info["kind"] = "recompile_limit";
    report(c.cb, "on_fallback", info);
    extra->skip = true;
    return nullptr;
  }
  if (extra->entries.empty()) return std::nullopt;
  int limit = recompile_limit();
  const int total_limit = config_int("accumulated_recompile_limit", 256);
  const bool over_total = static_cast<int>(extra->entries.size()) >= total_limit;
  if (over_total) limit = total_limit;
  if (over_total || entries_for_frame(extra, c.frame) >= limit) {
    if (c.strict) {
      raise_unsupported("recompile limit (" + std::to_string(limit) + ") reached for " +
                        py::str(c.code->co_name).cast<std::string>() + "; last guard failure: " + extra->last_failure);
      return nullptr;
    }
    if (!extra->had_graph) {
      // Nothing was ever captured here (e.g. a generated namedtuple __new__ that breaks at once): stop re-tracing it
      // quietly; running it as Python loses nothing.
      extra->skip = true;
      return nullptr;
    }
    if (!extra->warned) {
      extra->warned = true;
      py::dict info = base_info(c.code);
      info["reason"] = "recompile limit (" + std::to_string(limit) + ") reached; last guard failure: " +
                       extra->last_failure;
      info["kind"] = "recompile_limit";
      report(c.cb, "on_fallback", info);
    }
    return nullptr;
  }
  // Why did the newest entry not match? (reported as the recompile reason)
  std::string why;
  newest_entry(extra)->guards.check(frame_view(c.frame), &why);
  extra->last_failure = why;
  py::dict info = base_info(c.code);
  info["reason"] = why;
  report(c.cb, "on_recompile", info);
  return std::nullopt;
}

std::optional<EntryPtr> admit(FrameCompile& c) {
  if (std::optional<EntryPtr> r = admit_recompile(c)) return r;
  if (guards::torch_function_mode_active()) {
    // Torch functions dispatch to the mode, which a graph would skip: plain Python while a mode is active (the
    // global-state guard fails once it is gone, and the code compiles then).
    EntryPtr e = add_entry(c.extra, c.frame, guards::GuardSet(), c.cb);
    e->guards.add(guards::grad_mode_guard());
    e->guards.add(guards::global_state_guard());
    e->description = "a TorchFunctionMode is active";
    report_fallback(c.cb, c.code, "unsupported", "a TorchFunctionMode is active: the frame runs as Python");
    return e;
  }
  c.ri = codegen::resume_info(c.code);
  if (c.ri) {
    c.extra->continuation = true;
    if (continuation_too_deep(PyThreadState_Get())) {
      // Not remembered: a later call from a shallower stack compiles it.
      report_fallback(c.cb, c.code, "unsupported",
                      "graph breaks nested too deep (each continues in a new frame): the rest of the "
                      "function runs as Python near the recursion limit");
      return nullptr;
    }
  }
  return std::nullopt;
}

// The one place a restart request is decided (restart.h; how a restart works: csrc/interp/README.md). Honoured:
// fake tensors once (remembered for later compiles of this frame's code when the request says so: what asked is in
// no input's dynamic-shape state), a break at the failing instruction once per plan (not under nopython, where a
// break raises anyway, nor after an internal error), tensor operations kept out of try blocks once (the break placed
// for the earlier plan is dropped: the new trace may stop elsewhere). Anything else, or past kMaxRestarts, is not:
// the attempt's own outcome stands.
bool accept_restart(FrameCompile& c, const interp::Restart& r) {
  TracePlan& p = c.plan;
  if (p.restarts >= kMaxRestarts) return false;
  switch (r.kind) {
    case interp::RestartKind::FakeTensors:
      if (p.fake) return false;
      p.fake = true;
      if (r.remember) interp::services().need_fake_tensors(py::handle(reinterpret_cast<PyObject*>(c.code)));
      break;
    case interp::RestartKind::BreakAt:
      if (p.break_at >= 0 || c.strict || c.t().output().internal_error) return false;
      p.break_at = r.at;
      p.break_at_reason = r.reason;
      break;
    case interp::RestartKind::NoOpsInTry:
      if (!p.ops_in_try) return false;
      p.ops_in_try = false;
      p.break_at = -1;
      p.break_at_reason.clear();
      break;
  }
  ++p.restarts;
  p.honoured.append(py::str(interp::restart_kind_name(r.kind)));
  c.restarting = true;
  return true;
}

// The first plan: fake tensors when an earlier compile found a dynamic input (or asked for them), under
// compile(dynamic=True), and under an enabled autocast (it casts CPU and fake CPU tensors, never meta ones).
TracePlan first_plan(const FrameCompile& c, py::handle cb_dynamic) {
  TracePlan p;
  py::handle code_obj(reinterpret_cast<PyObject*>(c.code));
  p.fake = interp::services().frame_is_dynamic(code_obj, cb_dynamic).cast<bool>() || (guards::autocast_state() & 3) != 0;
  return p;
}

// One trace of the frame under c.plan; a restart it asks for goes to accept_restart.
void trace(FrameCompile& c, py::handle cb_dynamic) {
  c.tracer = std::make_unique<interp::Tracer>(c.code, frame_view(c.frame));
  interp::Tracer& t = *c.tracer;
  t.options().cb_dynamic = py::reinterpret_borrow<py::object>(cb_dynamic);
  if (c.plan.fake)
    t.options().shapes = interp::services().trace_shapes(py::handle(reinterpret_cast<PyObject*>(c.code)), cb_dynamic);
  t.options().allow_ops_in_try = c.plan.ops_in_try;
  if (c.ri) {
    t.options().owned_free = c.ri->owned_free;
    t.options().window_end = c.ri->tail_cut;
  }
  t.options().break_at = c.plan.break_at;
  t.options().break_at_reason = c.plan.break_at_reason;
  c.status = t.run();
  if (t.output().restart) accept_restart(c, *t.output().restart);
}

// What the trace's outcome means before any graph is compiled: an error of the user's request raised to the caller
// (as torch._dynamo raises it), a frame that cannot be captured (runs as Python under the guards gathered), a break
// under nopython, a frame with nothing for a graph (skipped, as torch._dynamo skips such frames).
std::optional<EntryPtr> decide(FrameCompile& c) {
  interp::Tracer& t = c.t();
  if (t.output().user_error) {
    py::tuple e = t.output().user_error;
    py::object type = e[0], value = e[1], tb = e[2];
    // PyErr_Restore steals the three references (release()); a None traceback is passed as NULL.
    PyErr_Restore(type.release().ptr(), value.release().ptr(), tb.is_none() ? nullptr : tb.release().ptr());
    return nullptr;
  }
  const auto& stop = t.output().stop;
  if (c.status == interp::Tracer::Status::Unsupported) {
    if (c.strict && t.output().internal_error) {
      raise_internal(c.code, located(stop), nullptr);
      return nullptr;
    }
    if (c.strict) {
      raise_unsupported(located(stop) +
                        "\nHint: remove the construct from the compiled region, or compile without "
                        "nopython/fullgraph to let it run as Python.");
      return nullptr;
    }
    py::dict info = base_info(c.code);
    info["reason"] = located(stop);
    info["kind"] = "unsupported";
    py::list breaks;
    breaks.append(break_info(stop));
    info["break_reasons"] = breaks;
    report(c.cb, "on_fallback", info);
    add_state_guards(t.trace());
    return c.entry("unsupported: " + stop.reason);
  }
  if (c.is_break() && c.strict) {
    raise_unsupported(located(stop) +
                      "\nHint: this is a graph break; remove the construct from the compiled region, or compile "
                      "without nopython/fullgraph to let it run as Python.");
    return nullptr;
  }
  add_state_guards(t.trace());
  if (!c.is_break() && !c.has_graph()) {
    c.extra->skip = true;
    return nullptr;
  }
  return std::nullopt;
}

// The FX GraphModule of the trace's graph (outputs: the tensors the rewritten code rebuilds values from) with its
// example inputs: the real inputs, or with dynamic shapes their fake examples, as torch.compile's.
py::object build_graph_module(FrameCompile& c, py::list& example_inputs) {
  interp::Tracer& t = c.t();
  std::vector<interp::ValuePtr> values =
      c.is_break() ? codegen::break_values(t) : std::vector<interp::ValuePtr>{t.frame().return_value};
  for (const auto& v : codegen::effect_values(t.trace())) values.push_back(v);  // tensors stored by side effects
  codegen::TensorKeysScope keys(t.trace());
  c.outs = codegen::collect_outputs(values);
  std::vector<graph::Arg> out_args;
  for (auto* n : c.outs) out_args.push_back(graph::Arg::ref(n));
  t.trace().graph.output(graph::Arg::tuple(std::move(out_args)));
  t.trace().graph.verify();
  // "_c": never one of torch._dynamo's names (__compiled_fn_<n>, __resume_at_<offset>_<n>), which it injects into
  // the same module globals when both compile functions of one module.
  c.name = "__compiled_fn_c" + std::to_string(g_compiled_counter++);
  py::object root = interp::loaded_module("torch.nn").attr("Module")();
  for (const auto& [attr, value] : t.trace().graph_attrs) root.attr("register_buffer")(attr, value);
  for (const auto& in : t.trace().inputs)
    example_inputs.append(t.options().dynamic() ? in.node->example_value : in.value);
  return t.trace().graph.to_fx(root, "GraphModule", c.meta);
}

// The graph to the backend (Callback.compile_graph) and the GraphCall around its result.
std::optional<EntryPtr> compile_graph(FrameCompile& c) {
  interp::Tracer& t = c.t();
  py::list example_inputs;
  py::object gm = build_graph_module(c, example_inputs);
  py::dict ginfo = base_info(c.code);
  ginfo["name"] = c.name;
  if (c.text) {
    ginfo["graph_tabular"] = t.trace().graph.tabular();
    ginfo["graph_readable"] = t.trace().graph.readable();
  }
  ginfo["op_count"] = t.trace().graph.op_count();
  ginfo["static_inputs"] = module_tensor_inputs(t.trace());
  // Read before the backend runs (it may rewrite the module): what a failed call of this graph changes.
  const interp::Services& services = interp::services();
  py::tuple policy = services.graph_error_policy(gm, codegen::Rebuilder::has_effects(t.trace()));
  if (t.output().ops_in_try && static_cast<GraphErrorPolicy>(policy[0].cast<int>()) != GraphErrorPolicy::Clean) {
    // Its failure could skip a handler: traced again with them kept out (never refused before the limit).
    if (accept_restart(c, interp::Restart::no_ops_in_try())) return std::nullopt;
    report_fallback(c.cb, c.code, "unsupported", interp::Restart::no_ops_in_try().reason);
    return c.entry("unsupported: tensor operations inside a try block");
  }
  py::object compiled;
  try {
    compiled = py::handle(c.cb).attr("compile_graph")(gm, example_inputs, ginfo);
  } catch (py::error_already_set& err) {
    // BackendCompilerFailed reaches the caller, as under torch.compile, unless config.suppress_errors (then the frame
    // runs as Python, with one warning). KeyboardInterrupt, SystemExit: always the user's.
    if (c.strict || !is_exception(err) || !suppress_errors()) {
      err.restore();
      return nullptr;
    }
    report_fallback(c.cb, c.code, "backend", std::string("backend failed: ") + err.what());
    return c.entry("backend failed");
  }
  GraphCallHooks hooks;
  auto opt = [](py::handle h) { return h.is_none() ? nullptr : h.ptr(); };
  hooks.rng_save = opt(policy[1]);
  hooks.rng_restore = opt(policy[2]);
  if ((hooks.snap_mask = opt(policy[3]))) {
    hooks.snap_save = services.graph_save_inputs.ptr();  // borrowed: the services hold them for the process
    hooks.snap_restore = services.graph_restore_inputs.ptr();
  }
  hooks.plan = lift_inputs(t.trace());
  py::object draws = random_draws(t.trace());  // owned here; the GraphCall takes its own references
  py::object draws_restore = draws.is_none() ? py::object() : services.random_values().attr("restore");
  if (draws_restore) {
    hooks.draws = draws.ptr();
    hooks.draws_restore = draws_restore.ptr();
  }
  PyObject* call = make_graph_call(compiled.ptr(), static_cast<GraphErrorPolicy>(policy[0].cast<int>()),
                                   hooks);  // new reference
  if (!call) throw py::error_already_set();
  c.graph_call = py::reinterpret_steal<py::object>(call);
  return std::nullopt;
}

// The rewritten code: straight line to the return, or the frame up to the break and its continuations. A state at
// the break that cannot be rebuilt as Python makes the whole frame run as Python.
std::optional<EntryPtr> emit_code(FrameCompile& c, py::object& new_code, std::vector<codegen::Resume>& resumes) {
  interp::Tracer& t = c.t();
  codegen::TensorKeysScope keys(t.trace());
  try {
    if (c.is_break()) {
      codegen::BreakCode bcode = codegen::graph_break(t, c.name, c.outs, g_resume_counter);
      new_code = bcode.code;
      resumes = std::move(bcode.resumes);
    } else {
      new_code = codegen::straight_line(t, c.name, c.outs);
    }
  } catch (const interp::Unsupported& u) {
    report_fallback(c.cb, c.code, "unsupported",
                    std::string(u.what()) + " (at a graph break: " + located(t.output().stop) + ")");
    return c.entry("unsupported");
  }
  ensure_extra(reinterpret_cast<PyCodeObject*>(new_code.ptr()))->generated = true;
  return std::nullopt;
}

// The graph and continuations published in the frame's globals, the cache entry added, on_compiled reported.
EntryPtr publish(FrameCompile& c, const py::object& new_code, const std::vector<codegen::Resume>& resumes) {
  interp::Tracer& t = c.t();
  const bool has_graph = c.has_graph();
  PyObject* globals = compat::frame_globals(c.frame);
  Injected injected{globals};
  if (has_graph) {
    if (PyDict_SetItemString(globals, c.name.c_str(), c.graph_call.ptr()) < 0) throw py::error_already_set();
    injected.names.push_back(c.name);
  }
  py::list resume_listing;
  for (const auto& r : resumes) {
    if (c.text)
      resume_listing.append(py::make_tuple(r.name, bytecode::format(reinterpret_cast<PyCodeObject*>(r.code.ptr()))));
    if (r.closure) continue;  // made by the rewritten frame from its cells, not published
    PyObject* fn = PyFunction_New(r.code.ptr(), globals);  // new reference
    if (!fn) throw py::error_already_set();
    int rc = PyDict_SetItemString(globals, r.name.c_str(), fn);
    Py_DECREF(fn);
    if (rc < 0) throw py::error_already_set();
    injected.names.push_back(r.name);
  }
  if (has_graph) c.extra->had_graph = true;
  if (t.options().dynamic()) add_shape_guards(t);
  if (has_graph) t.trace().guards.set_input_sources(lifted_sources(t.trace()));
  py::list guard_list = c.text ? guard_strings(t.trace().guards) : py::list();
  std::string guard_tree = c.text ? t.trace().guards.tree_text() : std::string();
  EntryPtr e = c.entry(c.is_break() ? "graph break" : "graph " + c.name);
  e->code = new_code;
  if (has_graph) e->graph = c.graph_call;
  e->injected = std::move(injected.names);
  injected.names.clear();  // owned by the entry now

  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.t0).count();
  py::dict info = base_info(c.code);
  if (c.text) {
    info["original_bytecode"] = bytecode::format(c.code);
    info["modified_bytecode"] = bytecode::format(reinterpret_cast<PyCodeObject*>(new_code.ptr()));
  }
  info["guards"] = guard_list;
  info["guard_tree"] = guard_tree;
  info["graph_count"] = has_graph ? 1 : 0;
  info["compile_time_s"] = secs;
  py::list breaks;
  if (c.is_break()) breaks.append(break_info(t.output().stop));
  info["break_reasons"] = breaks;
  info["resume_bytecode"] = resume_listing;
  info["restarts"] = c.plan.honoured;
  report(c.cb, "on_compiled", info);
  return e;
}

// The stages in order; an error in any of them is internal (the frame runs as Python, or InternalError under
// nopython) unless it is the user's (a KeyboardInterrupt, a ConstraintViolationError).
// One attempt under c.plan, trace to publish; std::nullopt with c.restarting set when a stage's restart request was
// honoured.
std::optional<EntryPtr> attempt(FrameCompile& c, py::handle cb_dynamic) {
  c.start_attempt();  // nothing of an earlier attempt's graph stage is used (its graph may be gone now)
  trace(c, cb_dynamic);
  if (c.restarting) return std::nullopt;
  if (std::optional<EntryPtr> r = decide(c)) return r;
  if (c.has_graph()) {
    std::optional<EntryPtr> r = compile_graph(c);
    if (r || c.restarting) return r;
  }
  py::object new_code;
  std::vector<codegen::Resume> resumes;
  if (std::optional<EntryPtr> r = emit_code(c, new_code, resumes)) return r;
  return publish(c, new_code, resumes);
}

EntryPtr translate_impl(compat::Frame* frame, PyObject* cb, CodeExtra* extra) {
  FrameCompile c(frame, cb, extra);
  try {
    if (std::optional<EntryPtr> r = admit(c)) return *r;
    py::object cb_dynamic = py::getattr(py::handle(c.cb), "dynamic", py::none());
    c.plan = first_plan(c, cb_dynamic);
    for (;;) {  // bounded: accept_restart honours at most kMaxRestarts requests
      std::optional<EntryPtr> r = attempt(c, cb_dynamic);
      if (r || !c.restarting) return r ? *r : nullptr;
    }
  } catch (py::error_already_set& err) {
    if (!is_exception(err) || interp::is_user_error(err.value())) {
      err.restore();
      return nullptr;
    }
    if (c.strict) {
      raise_internal(c.code, err.what(), &err);
      return nullptr;
    }
    report_fallback(cb, c.code, "internal", std::string("internal error: ") + err.what());
  } catch (const std::exception& err) {
    if (c.strict) {
      raise_internal(c.code, err.what(), nullptr);
      return nullptr;
    }
    try {
      report_fallback(cb, c.code, "internal", std::string("internal error: ") + err.what());
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
