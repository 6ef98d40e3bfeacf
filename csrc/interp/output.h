// output.h — owns `Output`, how a trace ended (returned, broke before an instruction, or refused), with the break
// state codegen and the hook consume, and `StopInfo`, where it stopped.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>

#include "interp/restart.h"

namespace cdynamo::interp {

namespace py = pybind11;

// Where the trace stopped when it could not continue.
struct StopInfo {
  std::string reason;
  std::string filename;
  int lineno = -1;
  std::string line;  // source text of lineno
};

// Returned: traced to RETURN_VALUE. Break: stopped before bc.insts[pc] with the stack as it was before
// that instruction (a graph break: the instruction runs as Python, then a continuation). Unsupported:
// the frame cannot be captured at all (it runs as plain Python).
enum class Status { Running, Returned, Break, Unsupported };

// The outcome of a trace (the frame's stack and locals where it stopped are in its Frame, the graph in its Trace).
struct Output {
  Status status = Status::Running;
  StopInfo stop;
  // The trace ended Unsupported because of an error of the tracer itself (not a construct it refuses).
  bool internal_error = false;
  bool conditional_break = false;  // Break on POP_JUMP_*_IF_TRUE/FALSE of a tensor (top of stack)
  // At a break inside `with torch.no_grad()`: the grad mode there (1 enabled, 0 disabled), which differs
  // from the frame's; the rewritten frame sets it after the graph. -1 otherwise.
  int grad_mode_after_graph = -1;
  // The graph holds tensor operations inside a try block of the frame (TraceOptions::allow_ops_in_try).
  bool ops_in_try = false;
  // The attempt ended asking to be traced again with one thing changed (restart.h): a RestartTrace the tracer raised
  // (fake tensors), or, when the instruction that stopped the trace had added guards before it failed (a callee
  // inlined part way), a break placed there at once, so that the entry holds only the guards of what the graph did.
  // hook/translate.cpp decides whether to honour it; the rest of the Output is this attempt's outcome.
  std::optional<Restart> restart;
  // (type, value, traceback) of an error the compile must raise to the caller (ConstraintViolationError), or empty.
  py::object user_error;
};

}  // namespace cdynamo::interp
