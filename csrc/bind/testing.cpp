// testing.cpp — owns cdynamo._C._testing: decode/assemble/format of code objects and cache inspection (guards
// checked without a frame: testing_guards.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bytecode/bytecode.h"
#include "graph/node_meta.h"
#include "hook/cache.h"
#include "interp/tracer.h"

namespace py = pybind11;
using namespace cdynamo;

namespace {
PyCodeObject* as_code(py::handle code) {
  if (!PyCode_Check(code.ptr())) throw py::type_error("expected a code object");
  return reinterpret_cast<PyCodeObject*>(code.ptr());
}
}  // namespace

void bind_testing_guards(py::module_& m);

void bind_testing(py::module_& m) {
  bind_testing_guards(m);
  m.def(
      "decode",
      [](py::object code) {
        bytecode::Bytecode bc = bytecode::decode(as_code(code));
        py::list out;
        for (const auto& i : bc.insts) {
          int target = i->target ? i->target->offset : -1;
          out.append(py::make_tuple(bytecode::opname(i->opcode), i->arg, i->offset, target, i->pos.line));
        }
        return out;
      },
      "Decoded instructions as (opname, arg, offset, jump target offset, line).");
  m.def(
      "roundtrip",
      [](py::object code) {
        PyCodeObject* c = as_code(code);
        bytecode::Bytecode bc = bytecode::decode(c);
        bytecode::Assembled a = bytecode::assemble(bc, c->co_firstlineno);
        return py::make_tuple(py::reinterpret_borrow<py::object>(a.code),
                              py::reinterpret_borrow<py::object>(a.exceptiontable),
                              py::reinterpret_borrow<py::object>(a.linetable), a.stacksize);
      },
      "decode then assemble: (co_code, co_exceptiontable, co_linetable, co_stacksize).");
  m.def(
      "format_code", [](py::object code) { return bytecode::format(as_code(code)); },
      "dis-style listing of a code object.");
  m.def("set_node_meta", &graph::set_node_meta, py::arg("on"),
        "Whether graphs made from now on carry meta stack_trace / nn_module_stack / source_fn_stack (on by "
        "default; benchmarks switch it off to measure its cost).");
  m.def("extra_count", &hook::extra_count, "Number of code objects holding cdynamo cache data.");
  m.def(
      "cache_entries",
      [](py::object code) {
        py::list out;
        if (hook::CodeExtra* e = hook::get_extra(as_code(code)))
          for (const auto& entry : e->entries)
            out.append(py::make_tuple(entry->description, entry->graph ? entry->graph : py::none()));
        return out;
      },
      "The cache entries of a code object in the order they are checked: (description, graph call or None).");
  m.def(
      "handled_opcodes",
      [] {
        py::list out;
        const auto& table = interp::handler_table();
        for (size_t op = 0; op < table.size(); ++op)
          if (table[op]) out.append(py::str(bytecode::opname(static_cast<int>(op))));
        return out;
      },
      "Names of the opcodes the symbolic interpreter has a handler for.");
}
