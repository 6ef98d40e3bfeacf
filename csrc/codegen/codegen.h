// codegen.h — owns generating the rewritten code object for a traced frame: call the compiled graph, rebuild
// the frame's results from its outputs and sources.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "codegen/rebuild.h"
#include "interp/tracer.h"

namespace cdynamo::codegen {

namespace py = pybind11;

// A generated continuation: its global name and code object.
struct Resume {
  std::string name;
  py::object code;
  // The continuation closes over the frame's cells (its code has free variables): the rewritten frame
  // makes the function itself (MAKE_FUNCTION with the cells) instead of loading a published global.
  bool closure = false;
};

struct BreakCode {
  py::object code;              // rewritten code of the frame (all arguments positional)
  std::vector<Resume> resumes;  // continuations to publish in the frame's globals
};

// Values that must be rebuilt after the graph when the trace stopped at a graph break: the stack
// (without the condition of a conditional break, which comes last) and the changed live locals.
std::vector<interp::ValuePtr> break_values(const interp::Tracer& t);

// The rewritten code of a frame whose trace returned: prefix, `compiled_name(*inputs)`, the return value
// rebuilt from the graph outputs, RETURN_VALUE. Returns a new code object (all arguments positional).
py::object straight_line(const interp::Tracer& t, const std::string& compiled_name,
                         const std::vector<graph::Node*>& outputs);

// The rewritten code of a frame whose trace stopped at a graph break (Tracer::Status::Break): call the
// graph (when `compiled_name` is not empty), rebuild stack and changed locals, run the breaking
// instruction as Python, then return `__resume_at_<offset>_<n>(*stack, *live_locals)`; for a conditional
// break, both branches call their own continuation. `counter` numbers continuations process-wide.
BreakCode graph_break(const interp::Tracer& t, const std::string& compiled_name,
                      const std::vector<graph::Node*>& outputs, int& counter);

}  // namespace cdynamo::codegen
