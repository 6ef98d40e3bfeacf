// windows.h — owns the window plan of very long functions: fixed cut points where a continuation stops
// copying the function and tail-calls a shared chain continuation, so N breaks cost O(N), not O(N^2).
#pragma once

#include <Python.h>

#include <vector>

#include "bytecode/bytecode.h"

namespace cdynamo::codegen {

// Instructions a continuation copies at least before its first cut, and the size below which a function
// has no cuts (its continuations copy all of its reachable rest, as before).
constexpr size_t kWindowInstructions = 1024;
constexpr size_t kWindowedFunction = 2048;

// Where continuations of one user function are cut. A cut is a top-level statement boundary (empty stack,
// outside every try/with range and every loop) where each live local is definitely bound, so the code
// after it can run in another function taking exactly those locals.
struct WindowPlan {
  std::vector<char> cut;               // per instruction of the origin: a cut point
  std::vector<std::vector<int>> args;  // per cut instruction: the origin slots passed on (live there)
  bool any() const { return !args.empty(); }
};

// The plan for `code` (borrowed) decoded as `bc`; empty for short functions, generators and coroutines,
// and functions with cell or free variables. `succ` and `live` are the origin's successors and liveness.
WindowPlan plan_windows(PyCodeObject* code, const bytecode::Bytecode& bc,
                        const std::vector<std::vector<size_t>>& succ, const std::vector<std::vector<char>>& live);

}  // namespace cdynamo::codegen
