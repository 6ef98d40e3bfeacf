// torch_rules.h — owns the rules that decide which callables, tensor methods and attributes go into graphs.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "interp/value.h"

namespace cdynamo::interp {

class Tracer;

enum class CallKind {
  TorchOp,         // torch function: traced into the graph as call_function
  TorchFactory,    // torch function that creates tensors from no tensor (needs device=meta to propagate)
  TorchMetadata,   // torch function whose non-tensor result depends only on guarded metadata
  Operator,        // operator.* function: graph node when a tensor is involved, folded otherwise
  PureBuiltin,     // builtin or math function folded on constant arguments
  GraphBreak,      // cdynamo.graph_break
  GradModeQuery,   // torch.is_grad_enabled: known at every point of the trace
  AutocastQuery,   // torch.is_autocast_enabled / is_autocast_cpu_enabled: folded under an AUTOCAST guard
  TorchFunctionQuery,  // torch._C._has_torch_function*: false for plain tensors
  DispatchModeStackQuery,  // torch.utils._python_dispatch._get_current_dispatch_mode_stack(): [] under GLOBAL_STATE
  CompilingQuery,  // torch.compiler.is_compiling / torch._dynamo.is_compiling: True while tracing
  TorchAssert,     // torch._assert(cond, msg): nothing when cond is a true constant
  JitAnnotate,     // torch.jit.annotate(type, value): value
  JitUnwrapOptional,  // torch.jit._unwrap_optional(x): x (not None)
  JitIsinstance,   // torch.jit.isinstance(obj, cls): isinstance for a plain class
  AllowedInGraph,  // user callable registered with cdynamo.allow_in_graph
  Disallowed,      // user callable registered with cdynamo.disallow_in_graph
  Unknown,
};

CallKind classify_callable(py::handle fn);
// An object of torch._ops.OpOverloadPacket / OpOverload (torch.ops.aten.add, torch.ops.aten.add.Tensor).
bool is_op_overload(py::handle fn);
// Forgets every memoized classification (reset()).
void clear_classification_cache();
// Modules whose attributes are program constants (torch and its submodules, math, operator).
bool is_trusted_module(py::handle mod);
// Modules of the standard library (by top-level package name, sys.stdlib_module_names).
bool is_stdlib_module(py::handle mod);
// True if `name` is a tensor method that may be put into a graph.
bool tensor_method_allowed(const std::string& name);
// True if the tensor method returns metadata (ints, Size, bool) computed from guarded properties.
bool tensor_method_metadata(const std::string& name);
// The readable name of a callable for messages ("print", "numpy.fft.fft", ...).
std::string callable_name(py::handle fn);

}  // namespace cdynamo::interp
