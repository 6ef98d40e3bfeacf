// graph.h — owns the FX-like IR (Graph, Node, Arg), its printers, verifier and conversion to torch.fx.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

namespace cdynamo::graph {

namespace py = pybind11;

enum class OpKind { Placeholder, GetAttr, CallFunction, CallMethod, CallModule, Output };
const char* op_name(OpKind k);  // "placeholder", "get_attr", "call_function", ...

struct Node;

// An argument of a node: a reference to an earlier node, a Python constant (int, float, bool, None,
// str, slice, dtype, device, torch.Size, Ellipsis, ...), or a tuple / list / dict of arguments.
struct Arg {
  enum class Kind { NodeRef, Const, Tuple, List, Dict, Slice };
  Kind kind = Kind::Const;
  Node* node = nullptr;                 // NodeRef
  py::object value;                     // Const (owned reference)
  std::vector<Arg> items;               // Tuple / List / Dict values; Slice: start, stop, step
  std::vector<std::string> keys;        // Dict keys (string keys only)

  static Arg ref(Node* n);
  static Arg constant(py::object v);
  static Arg tuple(std::vector<Arg> items);
  static Arg list(std::vector<Arg> items);
  static Arg dict(std::vector<std::string> keys, std::vector<Arg> values);
  static Arg slice(Arg start, Arg stop, Arg step);  // a slice whose bounds may be nodes (symbolic sizes)
};

// Where a node was made: one frame of the inline stack (its code, current line and the columns of the instruction
// being traced) and the frame that called it (null for the traced frame). Interned per graph: equal frames under
// equal callers are one object.
struct SrcFrame {
  py::object code;  // owned
  int line = -1;
  int col = -1;      // byte offsets of the instruction in its first line; -1: unknown
  int end_col = -1;
  std::shared_ptr<const SrcFrame> caller;
};
using SrcFramePtr = std::shared_ptr<const SrcFrame>;

// An nn.Module call a node was made inside (meta["nn_module_stack"]); `outer` is the enclosing call, if any.
struct ModuleScope {
  std::string key;   // str(id(module)), with "@<n>" for the n-th later call of the same path (torch._dynamo's keys)
  std::string path;  // torch._dynamo's qualified name of the module: "L['self'].layers.0"
  py::object cls;    // owned: the module's class
  std::shared_ptr<const ModuleScope> outer;
};
using ModuleScopePtr = std::shared_ptr<const ModuleScope>;

struct Node {
  OpKind op;
  std::string name;          // unique in the graph, fx naming rules
  py::object target;         // callable for call_function; str for call_method/call_module/get_attr/placeholder
  std::vector<Arg> args;
  std::vector<std::pair<std::string, Arg>> kwargs;
  py::object example_value;  // meta (or real) example tensor, or None
  int index = 0;             // position in Graph::nodes
  SrcFramePtr where;         // the instruction (and inline stack) that made it; null for the output
  ModuleScopePtr scope;      // the innermost nn.Module call it was made in, or null
};

class Graph {
 public:
  // Names follow torch.fx: a candidate from the target (function __name__, method name, snake_case
  // module path, placeholder name), made unique with _1, _2, ...; names that are Python keywords or
  // builtins (sum, abs, max, ...) get a suffix too ("sum_1"), as fx does.
  Node* placeholder(const std::string& name, py::object example_value);
  Node* get_attr(const std::string& qualname, py::object example_value);
  Node* call_function(py::object target, std::vector<Arg> args,
                      std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value);
  Node* call_method(const std::string& method, std::vector<Arg> args,
                    std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value);
  Node* call_module(const std::string& qualname, std::vector<Arg> args,
                    std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value);
  Node* output(Arg value);  // normally a Tuple of NodeRefs

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  // Number of call_function / call_method / call_module nodes.
  int op_count() const;

  // Placeholders are kept in front of all other nodes (a placeholder added late is inserted after the
  // last placeholder). mark()/rollback() undo the non-placeholder nodes added after a mark (used when
  // an instruction fails half-way and the trace stops before it).
  size_t mark() const { return nodes_.size() - num_placeholders_; }
  void rollback(size_t mark);

  // print_tabular-style table with columns opcode, name, target, args, kwargs. Targets print as
  // readable qualified names ("torch.sin", "operator.mul", "<method 'sum'>" -> "sum").
  std::string tabular() const;
  // Python-like listing: "sin = torch.sin(x)" per node and "return (mul,)".
  std::string readable() const;
  // Throws std::runtime_error naming the node if: a NodeRef points to a later or foreign node,
  // names are not unique, placeholders are not first, there is not exactly one output and it is last.
  void verify() const;

  // One pass: builds a torch.fx.Graph with the same node names and a torch.fx.GraphModule whose
  // root is `root` (an nn.Module holding get_attr / call_module targets; may be an empty Module).
  // Returns the GraphModule. Throws py::error_already_set on Python errors.
  // `meta`: write the nodes' stack_trace / nn_module_stack / source_fn_stack (node_meta.h).
  py::object to_fx(py::object root, const std::string& class_name = "GraphModule", bool meta = true) const;
  // --- provenance of the nodes (written as meta by to_fx; node_meta.cpp) ---
  // The instruction being traced: nodes added from now on are made there. `code` is borrowed and must stay alive
  // until the next call (the tracer holds it); a reference is taken only when a node is made there.
  void set_location(PyObject* code, int line, int col, int end_col) { pending_ = {code, line, col, end_col}; }
  // An inlined call starts at the current instruction (its frame becomes the caller of the callee's nodes);
  // leave_call(saved) returns to the caller, at that instruction.
  struct Pending {
    PyObject* code = nullptr;  // borrowed
    int line = -1, col = -1, end_col = -1;
  };
  struct CallSave {
    SrcFramePtr callers;
    Pending pending;
  };
  CallSave enter_call();
  void leave_call(CallSave saved);
  // A call of nn.Module `mod` (of class `cls`; both borrowed) known to torch._dynamo as `path` starts: nodes made
  // until leave_module(saved) are inside it.
  ModuleScopePtr enter_module(PyObject* mod, PyObject* cls, const std::string& path);
  void leave_module(ModuleScopePtr saved) { scope_ = std::move(saved); }

 private:
  std::string unique_name(const std::string& candidate);
  Node* add(OpKind op, std::string name, py::object target, std::vector<Arg> args,
            std::vector<std::pair<std::string, Arg>> kwargs, py::object example_value);
  std::vector<std::unique_ptr<Node>> nodes_;
  std::unordered_map<std::string, int> name_counts_;
  size_t num_placeholders_ = 0;
  std::unordered_set<std::string> used_names_;
  // provenance
  struct FrameKey {
    const void* code;
    int line, col, end_col;
    const void* caller;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& k) const;
  };
  SrcFramePtr current_frame();  // the interned frame of pending_ under callers_ (null when none is set)
  Pending pending_;
  SrcFramePtr callers_, last_frame_;
  std::unordered_map<FrameKey, SrcFramePtr, FrameKeyHash> frames_;
  ModuleScopePtr scope_;
  std::unordered_map<std::string, int> module_calls_;  // calls per module path, for the "@<n>" keys
};

namespace detail {
// fx's _snake_case: "_" before an ASCII capital that follows an ASCII lowercase letter, then lowercase.
std::string snake_case(std::string_view s);
// fx's Graph._target_to_str for a node: callable -> __name__; str -> strip __magic__; then snake_case.
std::string candidate_for(OpKind op, const py::handle& target);
// True if fx refuses `name` as a variable name (keyword, builtin, fx custom builtin like "torch").
bool is_illegal_name(const std::string& name);
}  // namespace detail

// Readable qualified name of a call target: "torch.sin", "operator.add", "torch.nn.functional.relu".
std::string target_name(const py::handle& target);
// fx-style repr of an argument: node names bare, constants by repr, tuples "(a, 1)", lists "[a]".
std::string format_arg(const Arg& a);

}  // namespace cdynamo::graph
