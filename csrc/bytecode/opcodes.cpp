// opcodes.cpp — owns opcode facts (generated tables from opcodes_gen.h) and memoized dis.stack_effect.
#include "bytecode/detail.h"
#include "opcodes_gen.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace cdynamo::bytecode {

namespace {
bool valid(int op) { return op >= 0 && op < 256; }
int base(int op) { return valid(op) ? gen::kDeopt[op] : op; }
}  // namespace

bool has_arg(int opcode) { return valid(opcode) && gen::kHasArg[base(opcode)]; }

bool is_jump(int opcode) {
  return valid(opcode) && (gen::kHasJrel[base(opcode)] || gen::kHasJabs[base(opcode)]);
}

bool is_backward_jump(int opcode) { return valid(opcode) && gen::kBackwardJump[base(opcode)]; }

bool is_unconditional_jump(int opcode) { return valid(opcode) && gen::kUnconditionalJump[base(opcode)]; }

bool is_terminator(int opcode) {
  return valid(opcode) && (gen::kScopeExit[base(opcode)] || gen::kUnconditionalJump[base(opcode)]);
}

int cache_entries(int opcode) { return valid(opcode) ? gen::kCacheEntries[opcode] : 0; }

int deopt(int opcode) { return base(opcode); }

const char* opname(int opcode) { return valid(opcode) ? gen::kOpname[opcode] : "<invalid>"; }

int opcode_by_name(const char* name) {
  if (name == nullptr || name[0] == '<') return -1;
  static const std::unordered_map<std::string, int> by_name = [] {
    std::unordered_map<std::string, int> m;
    for (int i = 0; i < 256; ++i) m.emplace(gen::kOpname[i], i);
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? -1 : it->second;
}

int stack_effect(int opcode, int arg, bool jump) {
  if (!valid(opcode) || gen::kOpname[opcode][0] == '<') {
    throw std::runtime_error("stack_effect: invalid opcode " + std::to_string(opcode));
  }
  const bool takes_arg = has_arg(opcode);
  if (!takes_arg) arg = 0;
  // The memo is only touched with the GIL held (a miss calls into Python), so the GIL guards it.
  static std::unordered_map<uint64_t, int> memo;
  const uint64_t key = (static_cast<uint64_t>(opcode) << 33) | (static_cast<uint64_t>(static_cast<uint32_t>(arg)) << 1) |
                       (jump ? 1u : 0u);
  if (auto it = memo.find(key); it != memo.end()) return it->second;

  using detail::Ref;
  const std::string what = std::string("dis.stack_effect(") + opname(opcode) + ", " + std::to_string(arg) + ")";
  // dis.stack_effect, looked up once: from sys.modules where dis is loaded (PyImport_ImportModule goes through
  // the running frame's __import__, which a frame with its own builtins may lack).
  static PyObject* stack_effect_fn = nullptr;  // strong reference, kept for the process lifetime
  if (!stack_effect_fn) {
    Ref name(PyUnicode_FromString("dis"));  // new reference
    if (!name) detail::throw_python_error(what);
    PyObject* loaded = PyImport_GetModule(name.get());  // new reference or nullptr
    if (!loaded && !PyErr_Occurred()) loaded = PyImport_ImportModule("dis");  // new reference
    Ref dis(loaded);
    if (!dis) detail::throw_python_error(what);
    stack_effect_fn = PyObject_GetAttrString(dis.get(), "stack_effect");  // new reference
    if (!stack_effect_fn) detail::throw_python_error(what);
  }
  PyObject* fn = stack_effect_fn;  // borrowed
  // Py_BuildValue returns new references; "O" increments Py_None / Py_True / Py_False itself.
  Ref args(takes_arg ? Py_BuildValue("(ii)", opcode, arg) : Py_BuildValue("(iO)", opcode, Py_None));
  Ref kwargs(Py_BuildValue("{sO}", "jump", jump ? Py_True : Py_False));
  if (!args || !kwargs) detail::throw_python_error(what);
  Ref res(PyObject_Call(fn, args.get(), kwargs.get()));  // new reference
  if (!res) detail::throw_python_error(what);
  const long effect = PyLong_AsLong(res.get());
  if (effect == -1 && PyErr_Occurred()) detail::throw_python_error(what);
  memo.emplace(key, static_cast<int>(effect));
  return static_cast<int>(effect);
}

}  // namespace cdynamo::bytecode
