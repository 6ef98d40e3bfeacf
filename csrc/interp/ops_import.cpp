// ops_import.cpp — owns IMPORT_NAME / IMPORT_FROM: imports of modules that are already imported, resolved
// at trace time from sys.modules (guarded by identity there); a first import is a graph break.
#include "bytecode/bytecode.h"
#include "interp/tracer.h"

namespace cdynamo::interp {

namespace {

using bytecode::Instruction;

}  // namespace

struct Tracer::ImportOps {
  // The absolute module name of `import <dots><name>` in a module whose globals are `globals` (borrowed).
  static std::string absolute_name(Tracer& t, const std::string& name, long level, PyObject* globals) {
    if (level == 0) return name;
    // Relative import: the package is __package__, else __name__ (a package if it has __path__, else its parent).
    PyObject* pkg = PyDict_GetItemString(globals, "__package__");  // borrowed
    std::string base;
    if (pkg && PyUnicode_Check(pkg)) {
      base = PyUnicode_AsUTF8(pkg);
    } else {
      PyObject* mod = PyDict_GetItemString(globals, "__name__");  // borrowed
      if (!mod || !PyUnicode_Check(mod)) t.unsupported("relative import in a module without __name__");
      base = PyUnicode_AsUTF8(mod);
      if (!PyDict_GetItemString(globals, "__path__")) {
        size_t dot = base.rfind('.');
        base = dot == std::string::npos ? std::string() : base.substr(0, dot);
      }
    }
    for (long k = 1; k < level; ++k) {
      size_t dot = base.rfind('.');
      if (dot == std::string::npos) t.unsupported("relative import beyond the top-level package");
      base = base.substr(0, dot);
    }
    if (base.empty()) t.unsupported("relative import with no known parent package");
    return name.empty() ? base : base + "." + name;
  }

  // sys.modules[name] as a value guarded by identity through sys.modules, or a graph break when it is missing.
  static ValuePtr imported_module(Tracer& t, const std::string& name) {
    PyObject* modules = PyImport_GetModuleDict();  // borrowed
    PyObject* m = PyDict_GetItemString(modules, name.c_str());  // borrowed
    if (!m || !PyModule_Check(m)) t.unsupported("import of module '" + name + "' that is not imported yet");
    return t.wrap(m, guards::Source::module_global(modules, name));
  }

  // IMPORT_NAME(namei): level and fromlist on the stack, the module (or top-level package) pushed.
  static void import_name(Tracer& t, const Instruction& i) {
    ValuePtr fromlist = t.peek(1), level = t.peek(2);
    if (level->kind != VKind::Const || !PyLong_Check(level->obj.ptr()))
      t.unsupported("import with a non-constant level");
    bool has_fromlist = fromlist->kind == VKind::Tuple ? !fromlist->items.empty()
                                                         : !(fromlist->kind == VKind::Const && fromlist->obj.is_none());
    if (fromlist->kind != VKind::Tuple && !(fromlist->kind == VKind::Const && fromlist->obj.is_none()))
      t.unsupported("import with a non-constant fromlist");
    // An overridden __import__ (in the frame's builtins) would see this import: leave it to Python.
    PyObject* imp = PyDict_Check(t.fv.builtins) ? PyDict_GetItemString(t.fv.builtins, "__import__") : nullptr;
    static PyObject* builtin_import = PyDict_GetItemString(PyEval_GetBuiltins(), "__import__");  // borrowed, immortal in practice
    if (imp != builtin_import) t.unsupported("import with an overridden __import__");
    std::string name = py::str(t.name_at(i.arg)).cast<std::string>();
    std::string full = absolute_name(t, name, PyLong_AsLong(level->obj.ptr()), t.fv.globals);
    ValuePtr leaf = imported_module(t, full);
    ValuePtr out = leaf;
    if (!has_fromlist) {  // `import a.b.c` binds the top-level package `a`
      if (PyLong_AsLong(level->obj.ptr()) != 0) t.unsupported("relative import without names");
      size_t dot = full.find('.');
      if (dot != std::string::npos) out = imported_module(t, full.substr(0, dot));
    }
    t.pop();
    t.pop();
    t.push(out);
  }

  // IMPORT_FROM(namei): the module stays on the stack; its attribute (or already-imported submodule) is pushed.
  static void import_from(Tracer& t, const Instruction& i) {
    ValuePtr mod = t.peek(1);
    std::string name = py::str(t.name_at(i.arg)).cast<std::string>();
    if (mod->kind != VKind::Object || !PyModule_Check(mod->obj.ptr())) t.unsupported("from-import of a non-module");
    if (!PyObject_HasAttrString(mod->obj.ptr(), name.c_str())) {
      PyErr_Clear();
      t.unsupported("from-import of '" + name + "' that is not an attribute of its module yet");
    }
    t.push(t.load_attr(mod, name));
  }
};

void Tracer::register_import(HandlerTable& t) {
  on_opcode(t, "IMPORT_NAME", ImportOps::import_name);
  on_opcode(t, "IMPORT_FROM", ImportOps::import_from);
}

}  // namespace cdynamo::interp
