// codegen.h — owns generating the rewritten code object for a traced frame: call the compiled graph, rebuild
// the frame's results from its outputs and sources.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "interp/tracer.h"

namespace cdynamo::codegen {

namespace py = pybind11;

// Graph nodes whose values must leave the graph to rebuild `values` (tensors reachable through tuples
// and lists), deduplicated, in first-seen order.
std::vector<graph::Node*> collect_outputs(const std::vector<interp::ValuePtr>& values);

// The rewritten code of a frame whose trace returned: prefix, `compiled_name(*inputs)`, the return value
// rebuilt from the graph outputs, RETURN_VALUE. Returns a new code object (all arguments positional).
py::object straight_line(interp::Tracer& t, const std::string& compiled_name,
                         const std::vector<graph::Node*>& outputs);

}  // namespace cdynamo::codegen
