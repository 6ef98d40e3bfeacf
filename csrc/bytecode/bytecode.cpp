// bytecode.cpp — owns the Bytecode container methods, Assembled's reference handling and shared helpers.
#include "bytecode/detail.h"

#include <stdexcept>
#include <utility>

namespace cdynamo::bytecode {

Instruction* Bytecode::append(int opcode, int arg, Instruction* target) {
  return insert(insts.size(), opcode, arg, target);
}

Instruction* Bytecode::insert(size_t at, int opcode, int arg, Instruction* target) {
  if (at > insts.size()) throw std::runtime_error("Bytecode::insert: index out of range");
  auto inst = std::make_unique<Instruction>();
  inst->opcode = opcode;
  inst->arg = arg;
  inst->target = target;
  // Synthesized instructions take a neighbour's position so tracebacks stay meaningful.
  if (at < insts.size()) {
    inst->pos = insts[at]->pos;
  } else if (!insts.empty()) {
    inst->pos = insts.back()->pos;
  }
  Instruction* raw = inst.get();
  if (at < insts.size()) {  // later indices shift: the index is rebuilt on the next lookup
    index_.clear();
    indexed_ = 0;
  }
  insts.insert(insts.begin() + static_cast<std::ptrdiff_t>(at), std::move(inst));
  return raw;
}

int Bytecode::index_of(const Instruction* inst) const {
  if (indexed_ > insts.size()) {  // insts was changed directly (shrunk): start over
    index_.clear();
    indexed_ = 0;
  }
  for (; indexed_ < insts.size(); ++indexed_) index_[insts[indexed_].get()] = static_cast<int>(indexed_);
  auto it = index_.find(inst);
  if (it == index_.end()) return -1;
  return insts[static_cast<size_t>(it->second)].get() == inst ? it->second : -1;
}

Instruction* Bytecode::at_offset(int offset) const {
  for (const auto& inst : insts) {
    if (inst->offset == offset) return inst.get();
  }
  return nullptr;
}

Assembled::~Assembled() {
  // Each field holds a new reference (or nullptr).
  Py_XDECREF(code);
  Py_XDECREF(exceptiontable);
  Py_XDECREF(linetable);
}

Assembled::Assembled(Assembled&& o) noexcept
    : code(std::exchange(o.code, nullptr)),
      exceptiontable(std::exchange(o.exceptiontable, nullptr)),
      linetable(std::exchange(o.linetable, nullptr)),
      stacksize(o.stacksize) {}

namespace detail {

void throw_python_error(const std::string& context) {
  std::string msg = context;
  if (!PyErr_Occurred()) throw std::runtime_error(msg + ": unknown Python error");
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);  // we now own these three references
  PyErr_NormalizeException(&type, &value, &tb);
  if (type != nullptr) msg += std::string(": ") + reinterpret_cast<PyTypeObject*>(type)->tp_name;
  if (value != nullptr) {
    Ref s(PyObject_Str(value));  // new reference
    const char* text = s ? PyUnicode_AsUTF8(s.get()) : nullptr;  // borrowed buffer of `s`
    if (text != nullptr) msg += std::string(": ") + text;
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  PyErr_Clear();  // str() above may itself have failed
  throw std::runtime_error(msg);
}

std::string_view bytes_view(PyObject* bytes, const char* what) {
  if (bytes == nullptr || !PyBytes_Check(bytes)) throw std::runtime_error(std::string(what) + " is not bytes");
  return {PyBytes_AS_STRING(bytes), static_cast<size_t>(PyBytes_GET_SIZE(bytes))};
}

}  // namespace detail
}  // namespace cdynamo::bytecode
