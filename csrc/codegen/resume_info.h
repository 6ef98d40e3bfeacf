// resume_info.h — owns what cdynamo remembers per code object for continuations: the decoded bytecode and
// liveness of a user's code (computed once), and for each __resume_at_* code, the user's code it continues.
#pragma once

#include <pybind11/pybind11.h>

#include <unordered_map>
#include <vector>

#include "bytecode/bytecode.h"
#include "codegen/windows.h"

namespace cdynamo::codegen {

namespace py = pybind11;

// A code object a continuation can be made from (the user's own code), decoded once for its lifetime.
struct OriginInfo {
  bytecode::Bytecode bc;
  std::vector<std::vector<size_t>> succ;  // successors(bc)
  std::vector<std::vector<char>> live;    // live_locals(bc, co_nlocals)
  WindowPlan windows;                     // cut points (none unless the function is very long)
  // The chain continuation made at each cut (weak references to code objects: the continuations that
  // tail-call a chain hold it as a constant, and a chain holds the origin, so a strong one would cycle).
  mutable std::unordered_map<size_t, py::object> chains;
};

// A __resume_at_* code object: the user's code it continues, and where each of its parts came from.
struct ResumeInfo {
  py::object origin;                // the user's code object (strong reference)
  std::vector<int> origin_index;    // per instruction of the continuation: its index in origin's bc (-1: prologue)
  std::vector<int> slot_in_resume;  // per localsplus slot of origin: its slot in the continuation (cells: free)
  std::vector<char> owned_free;     // per localsplus slot of the continuation: a free variable holding a cell
                                    // of the origin (not one of the origin's own free variables)
  std::vector<int> tail_cut;        // per instruction of the continuation: at the first instruction of a
                                    // tail call to a chain, the origin index of its cut; else -1
};

// Both live in the code object's co_extra (an index of codegen's own) and die with it.
// The decoded bytecode and liveness of `code` (borrowed; valid while `code` lives). Throws on failure.
const OriginInfo& origin_info(PyCodeObject* code);
// The continuation record of `code`, or nullptr for a code object cdynamo did not make (borrowed).
const ResumeInfo* resume_info(PyCodeObject* code);
// Attaches `info` to `code` (takes ownership). Throws on failure.
void set_resume_info(PyCodeObject* code, ResumeInfo* info);

}  // namespace cdynamo::codegen
