// node_meta.cpp — owns node provenance: interning the inline-stack frames and nn.Module scopes nodes are made in,
// and writing them as torch._dynamo's meta["stack_trace"], ["nn_module_stack"], ["source_fn_stack"] in to_fx.
#include "graph/node_meta.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace cdynamo::graph {

namespace {

bool g_node_meta = true;

// Python objects used while writing meta: looked up once and kept for the process (new references, never
// released: module attributes and constants that outlive every graph).
struct MetaRefs {
  PyObject* frame_summary;  // traceback.FrameSummary
  PyObject* from_list;      // traceback.StackSummary.from_list
  PyObject* format_frame;   // traceback.StackSummary().format_frame_summary (bound)
  PyObject* summary_kw;     // ("lookup_line", "colno", "end_colno")
  PyObject* k_module_stack; // interned meta keys
  PyObject* k_fn_stack;
  PyObject* k_stack_trace;
  static const MetaRefs& get() {
    static const MetaRefs* refs = [] {
      py::module_ tb = py::module_::import("traceback");
      py::object stack_summary = tb.attr("StackSummary");
      return new MetaRefs{py::object(tb.attr("FrameSummary")).release().ptr(),
                          py::object(stack_summary.attr("from_list")).release().ptr(),
                          py::object(stack_summary().attr("format_frame_summary")).release().ptr(),
                          py::make_tuple("lookup_line", "colno", "end_colno").release().ptr(),
                          PyUnicode_InternFromString("nn_module_stack"), PyUnicode_InternFromString("source_fn_stack"),
                          PyUnicode_InternFromString("stack_trace")};
    }();
    return *refs;
  }
};

// torch._dynamo leaves out frames of torch.nn's module files (its regex .*torch/nn/modules.*): an op made in
// nn.Linear.forward points at the user's line that called the layer. cdynamo's own trampoline calling the module
// that export / optimize(module) traces (eval_frame.py) is no user frame either.
bool hidden_frame(PyCodeObject* co) {
  const char* file = PyUnicode_AsUTF8(co->co_filename);  // borrowed, NULL on error
  if (!file) {
    PyErr_Clear();
    return false;
  }
  return std::strstr(file, "torch/nn/modules") != nullptr || std::strcmp(file, "<cdynamo module call>") == 0;
}

py::object or_none(int v) { return v >= 0 ? py::object(py::int_(v)) : py::object(py::none()); }

// traceback.FrameSummary(file, line, name, lookup_line=False, colno=..., end_colno=...) of one frame, as
// torch._dynamo's InstructionTranslator.frame_summary() makes it (the line is read by the formatting, from linecache).
py::object frame_summary(const SrcFrame& f) {
  const MetaRefs& r = MetaRefs::get();
  auto* co = reinterpret_cast<PyCodeObject*>(f.code.ptr());  // borrowed
  py::object line = or_none(f.line), col = or_none(f.col), end_col = or_none(f.end_col);
  PyObject* args[6] = {co->co_filename, line.ptr(), co->co_name, Py_False, col.ptr(), end_col.ptr()};  // borrowed
  PyObject* fs = PyObject_Vectorcall(r.frame_summary, args, 3, r.summary_kw);  // new reference
  if (!fs) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fs);
}

// True if frames a and b print as the same traceback line (file, line, function): StackSummary.format() collapses
// more than 3 such frames in a row into "[Previous line repeated N more times]".
bool same_line(const SrcFrame& a, const SrcFrame& b) {
  if (a.line != b.line) return false;
  if (a.code.ptr() == b.code.ptr()) return true;
  auto* x = reinterpret_cast<PyCodeObject*>(a.code.ptr());  // borrowed
  auto* y = reinterpret_cast<PyCodeObject*>(b.code.ptr());  // borrowed
  return PyUnicode_Compare(x->co_filename, y->co_filename) == 0 && PyUnicode_Compare(x->co_name, y->co_name) == 0;
}

}  // namespace

void set_node_meta(bool on) { g_node_meta = on; }
bool node_meta() { return g_node_meta; }

size_t Graph::FrameKeyHash::operator()(const FrameKey& k) const {
  size_t h = std::hash<const void*>()(k.code);
  for (int v : {k.line, k.col, k.end_col}) h = h * 1000003u ^ std::hash<int>()(v);
  return h * 1000003u ^ std::hash<const void*>()(k.caller);
}

SrcFramePtr Graph::current_frame() {
  if (!pending_.code) return nullptr;
  const SrcFrame* last = last_frame_.get();
  if (last && last->code.ptr() == pending_.code && last->line == pending_.line && last->col == pending_.col &&
      last->end_col == pending_.end_col && last->caller == callers_)
    return last_frame_;
  FrameKey key{pending_.code, pending_.line, pending_.col, pending_.end_col, callers_.get()};
  auto it = frames_.find(key);
  if (it == frames_.end()) {
    auto f = std::make_shared<SrcFrame>();
    f->code = py::reinterpret_borrow<py::object>(pending_.code);  // new reference, held by the frame
    f->line = pending_.line;
    f->col = pending_.col;
    f->end_col = pending_.end_col;
    f->caller = callers_;
    it = frames_.emplace(key, std::move(f)).first;
  }
  last_frame_ = it->second;
  return last_frame_;
}

Graph::CallSave Graph::enter_call() {
  CallSave saved{callers_, pending_};
  callers_ = current_frame();
  return saved;
}

void Graph::leave_call(CallSave saved) {
  callers_ = std::move(saved.callers);
  pending_ = saved.pending;
}

ModuleScopePtr Graph::enter_module(PyObject* mod, PyObject* cls, const std::string& path) {
  ModuleScopePtr saved = scope_;
  int& calls = module_calls_[path];
  auto s = std::make_shared<ModuleScope>();
  s->key = std::to_string(reinterpret_cast<uintptr_t>(mod));  // id(mod)
  if (calls > 0) s->key += "@" + std::to_string(calls);
  ++calls;
  s->path = path;
  s->cls = py::reinterpret_borrow<py::object>(cls);  // new reference, held by the scope
  s->outer = scope_;
  scope_ = std::move(s);
  return saved;
}

MetaWriter::MetaWriter(py::handle root) : root_(root) {}

py::object MetaWriter::stack_trace(const SrcFrame* innermost) {
  auto it = traces_.find(innermost);
  if (it != traces_.end()) return it->second;
  const MetaRefs& r = MetaRefs::get();
  // The visible frames, innermost first; a run of 4+ frames on one line (recursion) is formatted as a whole by
  // StackSummary.format(), which collapses it; otherwise the text is the caller's text plus this frame's lines.
  std::vector<const SrcFrame*> visible;
  size_t run = 0, longest = 0;
  for (const SrcFrame* f = innermost; f; f = f->caller.get()) {
    if (hidden_frame(reinterpret_cast<PyCodeObject*>(f->code.ptr()))) continue;
    run = !visible.empty() && same_line(*visible.back(), *f) ? run + 1 : 1;
    longest = std::max(longest, run);
    visible.push_back(f);
  }
  py::object text;
  if (longest > 3) {
    py::list summaries;
    for (auto f = visible.rbegin(); f != visible.rend(); ++f) summaries.append(frame_summary(**f));
    py::object lines = py::reinterpret_borrow<py::object>(r.from_list)(summaries).attr("format")();
    text = py::str("").attr("join")(lines);
  } else if (visible.empty()) {
    text = py::str("");
  } else {
    const SrcFrame* own = visible.front();
    py::object frame = py::reinterpret_steal<py::object>(PyObject_CallOneArg(r.format_frame, frame_summary(*own).ptr()));
    if (!frame) throw py::error_already_set();
    if (frame.is_none()) frame = py::str("");
    if (own->caller) {
      py::object outer = stack_trace(own->caller.get());
      text = py::reinterpret_steal<py::object>(PyUnicode_Concat(outer.ptr(), frame.ptr()));
      if (!text) throw py::error_already_set();
    } else {
      text = frame;
    }
  }
  traces_.emplace(innermost, text);
  return text;
}

const MetaWriter::ScopeMeta& MetaWriter::scope_meta(const ModuleScope* scope) {
  auto it = scopes_.find(scope);
  if (it != scopes_.end()) return it->second;
  std::vector<const ModuleScope*> chain;
  for (const ModuleScope* s = scope; s; s = s->outer.get()) chain.push_back(s);
  ScopeMeta m;
  m.stack = py::dict();
  for (auto s = chain.rbegin(); s != chain.rend(); ++s)  // outermost first
    m.stack[py::str((*s)->key)] = py::make_tuple(py::str((*s)->path), (*s)->cls);
  // torch._dynamo names an op made inside a torch.nn layer (not a container) or a torch.ao module by that
  // layer's class in source_fn_stack.
  std::string mod = py::str(py::getattr(scope->cls, "__module__", py::str(""))).cast<std::string>();
  auto starts = [&](const char* p) { return mod.compare(0, std::strlen(p), p) == 0; };
  if ((starts("torch.nn.modules") || starts("torch.ao.")) && !starts("torch.nn.modules.container"))
    m.layer = scope->cls;
  return scopes_.emplace(scope, std::move(m)).first->second;
}

void MetaWriter::write(const Node& n, py::handle fx_meta) {
  PyObject* meta = fx_meta.ptr();  // borrowed dict
  const MetaRefs& r = MetaRefs::get();
  const ScopeMeta* sm = n.scope ? &scope_meta(n.scope.get()) : nullptr;
  if (sm) {
    py::object copy = py::reinterpret_steal<py::object>(PyDict_Copy(sm->stack.ptr()));  // each node its own dict
    if (!copy || PyDict_SetItem(meta, r.k_module_stack, copy.ptr()) < 0) throw py::error_already_set();
  }
  if (n.op == OpKind::CallFunction || n.op == OpKind::CallMethod || n.op == OpKind::CallModule) {
    py::object target = n.target;
    if (n.op == OpKind::CallModule) {
      target = py::type::of(root_.attr("get_submodule")(n.target));
    } else if (sm && sm->layer) {
      target = sm->layer;
    }
    py::list fn_stack;
    fn_stack.append(py::make_tuple(py::str(n.name), target));
    if (PyDict_SetItem(meta, r.k_fn_stack, fn_stack.ptr()) < 0) throw py::error_already_set();
  }
  if (n.where) {
    py::object text = stack_trace(n.where.get());
    if (PyDict_SetItem(meta, r.k_stack_trace, text.ptr()) < 0) throw py::error_already_set();
  }
}

}  // namespace cdynamo::graph
