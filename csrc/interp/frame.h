// frame.h — owns `Frame`, the state of one frame being interpreted (the traced frame, or an inlined callee): the
// Tracer holds the running one and swaps a callee's in and out whole around an inlined call (inline.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "bytecode/bytecode.h"
#include "guards/source.h"
#include "interp/value.h"

namespace cdynamo::interp {

class Tracer;

struct Frame {
  PyCodeObject* code = nullptr;  // borrowed: the traced frame's, or the inlined function's (alive while it runs)
  // The real frame's view (borrowed pointers): its localsplus stays the traced frame's in a callee; `globals` and
  // `builtins` are the running function's module's.
  guards::FrameView fv;
  bytecode::Bytecode bc;
  std::vector<ValuePtr> stack;
  std::vector<ValuePtr> locals;      // per localsplus slot; null = not yet read / unbound
  std::vector<char> local_loaded;    // slot was read from the frame (wrapped) or assigned
  // Per localsplus slot: the Cell value shared with functions made in the trace (null until LOAD_CLOSURE captures
  // the slot). A captured slot is read and written through its cell, so a nested function sees later assignments and
  // its `nonlocal` assignments reach this frame.
  std::vector<ValuePtr> cell_boxes;
  py::object kw_names;               // tuple set by KW_NAMES for the next CALL
  ValuePtr return_value;
  size_t pc = 0;                     // index into bc.insts of the instruction being run
  bool stopped = false;
  // While a generator expression is inlined: the values it yielded so far (null otherwise).
  std::vector<ValuePtr>* yields = nullptr;

 private:
  friend class Tracer;  // its only writer: the running line and the trust of globals are the Tracer's bookkeeping
  int lineno_ = -1;
  // Globals of an inlined torch library frame: program constants (not guarded).
  bool trusted_globals_ = false;
  // Per localsplus slot of an inlined function: the real closure cell of a free variable (an Object with its
  // `__closure__[k]` source; null elsewhere). A `nonlocal` assignment is an attribute store on it, replayed as
  // `cell.cell_contents = value` after the graph (Tracer::store_attr), and read back by later inlined calls.
  std::vector<ValuePtr> real_cells_;
};

}  // namespace cdynamo::interp
