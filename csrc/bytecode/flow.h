// flow.h — owns the control-flow successors of a decoded code object (shared by the tracer's loop test and
// codegen's liveness).
#pragma once

#include <cstddef>
#include <vector>

#include "bytecode/bytecode.h"

namespace cdynamo::bytecode {

// Per instruction index: the indices control can reach next (fall-through, jump target, the handlers of the
// exception-table entries covering it).
std::vector<std::vector<size_t>> successors(const Bytecode& bc);

}  // namespace cdynamo::bytecode
