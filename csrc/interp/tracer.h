// tracer.h — owns `Tracer`, the symbolic interpreter: its run loop and the private machinery over its Frame and Trace.
#pragma once

#include <pybind11/pybind11.h>

#include <array>
#include <initializer_list>
#include <optional>
#include <unordered_map>
#include <set>
#include <unordered_set>
#include <string>
#include <utility>
#include <vector>

#include "bytecode/bytecode.h"
#include "graph/graph.h"
#include "guards/guard.h"
#include "interp/example_values.h"
#include "interp/frame.h"
#include "interp/output.h"
#include "interp/restart.h"
#include "interp/trace.h"
#include "interp/value.h"

namespace cdynamo::interp {

class Tracer;
// Keyword arguments of a call, in call order: (name, value).
using Kwargs = std::vector<std::pair<std::string, ValuePtr>>;
using Handler = void (*)(Tracer&, const bytecode::Instruction&);
using HandlerTable = std::array<Handler, 256>;

// The class attribute `name` of a user object (borrowed, may be NULL): of an object made in the trace, or of
// one of the frame that is not a class, a module or an nn.Module; NULL for any other value (protocols.cpp).
PyObject* user_class_attr(const ValuePtr& v, const char* name);
// A builtin exception class (IndexError, ValueError, ...): calling it has no side effects.
bool is_builtin_exception_class(py::handle cls);
// The __exit__ that a rebuilt `with` block holds after a graph break (ops_with.cpp): for mode 1/0 (a
// `with torch.enable_grad()/no_grad()` block) it sets grad mode back to 1/0; for kNoopExit (a profiler
// record_function block, not recorded) it does nothing. grad_exit_mode gives the mode of one of those three
// objects, -1 for anything else.
constexpr int kNoopExit = 2;
py::handle grad_exit_callable(int mode);
// The function a continuation calls as f(cell, name) before reading or deleting a free variable that is a cell of the
// function it continues (codegen/graph_break.cpp): raises UnboundLocalError, as that function would, when the cell is
// empty (CPython names the free variable's error NameError). Traced as a no-op on a cell known to be full.
py::handle unbound_cell_check();
int grad_exit_mode(py::handle obj);
// True if calling a pure function on `v` at trace time is sound: constants, tuples/lists of them, and
// immutable objects (classes, functions, modules); never iterators, dicts, sets or user objects.
bool foldable(const ValuePtr& v);
// Puts handler `h` in the table under opcode `name` (skipped when this Python has no such opcode).
void on_opcode(HandlerTable& t, const char* name, Handler h);
// The opcode -> handler table (built once from the families above).
const HandlerTable& handler_table();
// A class whose objects the trace can make: a Python class (type's instance) with object.__new__, an
// instance __dict__, no __getattr__/__setattr__ of its own and only Python classes up to object.
bool is_plain_class(py::handle cls);
// A Python class whose objects are plain: metaclass type or ABCMeta, an instance __dict__, object's __new__,
// only Python classes up to object (shared by is_plain_class and copy.deepcopy's rule).
bool is_plain_python_type(PyTypeObject* type);
// A dataclass subclass of transformers' ModelOutput that keeps ModelOutput's behaviour (records.cpp).
bool is_record_class(py::handle cls);
// Sets keyword `name` in `kwargs` (replacing an existing one in place); returns true if it replaced one.
bool set_kwarg(std::vector<std::pair<std::string, ValuePtr>>& kwargs, const std::string& name, ValuePtr value);
// True for classes made by collections.namedtuple / typing.NamedTuple (direct tuple subclasses with _fields).
bool is_namedtuple_class(py::handle cls);
// True for torch.no_grad / torch.enable_grad (classes whose `with` blocks are traced; ops_with.cpp).
bool is_grad_context_class(py::handle fn);
// The function a rewritten frame calls as f(exit_1, ..., exit_n) to leave the torch contexts it entered around a
// breaking instruction: each `__exit__` not None, innermost first, with (None, None, None) (torch_contexts.cpp).
py::handle ctx_exit_all_callable();
// Context classes whose `with` the trace treats as a no-op: torch.autograd.profiler.record_function
// (torch.profiler's too; the range is not recorded, as torch._dynamo) and contextlib.nullcontext. Their objects
// are made at trace time from constant arguments (the constructors only store them).
bool is_noop_context_class(py::handle fn);
// True for a Python function marked by cdynamo.assume_constant_result / torch._dynamo.assume_constant_result
// (assume_constant.cpp).
bool marked_constant_result(py::handle f);

// Stack items a graph break before `i` rebuilds as its operands (the rewritten frame runs it as Python);
// -2 where a break may stop but the instruction cannot be restarted there, -1 where no break may stop.
// The one list tracer.cpp (breakable) and codegen/graph_break.cpp share.
int restart_operands(const bytecode::Instruction& i);
std::string describe_module_made(const ValuePtr& cls);  // the class a made module names (made_modules.cpp)

// The module `name` from sys.modules, imported only when missing: an import through the running frame's
// __import__ fails in a frame whose builtins lack it (a function made with globals without __builtins__).
py::object loaded_module(const char* name);
// True when class `cls` (borrowed) has type's own __subclasses__ (no metaclass override; class_queries.cpp).
bool is_type_subclasses(PyObject* cls);
// Whether `exc` (borrowed) is an error of the user's request a compile raises to the caller (ConstraintViolationError);
// never throws.
bool is_user_error(py::handle exc);

// A source as torch._dynamo and its ShapeEnv name it in guards: L['x'], L['self'].weight, G['table'][0].
std::string shape_source_name(const guards::Source& s);

// The plain number a symbolic one (torch.SymInt / SymBool / SymFloat, borrowed) has now: bool(), int() or
// float() of it, which makes its ShapeEnv record the guard that keeps the answer true. New reference.
py::object plain_number(py::handle example);
// plain_number without mapping a data-dependent error to Unsupported (throws py::error_already_set).
py::object plain_number_now(py::handle example);

// The symbolic interpreter of one trace. Its state is in four parts, each a private base: the running Frame (code, fv,
// bc, stack, locals, pc, ...; swapped whole around an inlined call), the TraceOptions the hook set before run(), the
// Trace (graph, guards, inputs, side effects: shared by every frame of the trace) and the Output (how it ended).
// Its public interface is what the hook and codegen need: build, set options, run, read the result. The opcode
// handlers (ops_*.cpp), the call / attribute / library machinery and the helpers they share are private members:
// a file's handlers and rules are static members of one private nested class declared below and defined in that
// file; handler_table(), which registers them, is the one friend.
class Tracer : private Frame, private TraceOptions, private Trace, private Output {
 public:
  using Status = interp::Status;
  // `code` and the FrameView are borrowed for the Tracer's lifetime.
  Tracer(PyCodeObject* code, const guards::FrameView& fv);
  // What the hook decides before run() (dynamic shapes, a continuation's layout, an earlier attempt's lessons).
  TraceOptions& options() { return *this; }
  const TraceOptions& options() const { return *this; }
  // Interprets from the first instruction until RETURN_VALUE or an unsupported construct.
  // Never throws; the outcome is in output().
  Status run();
  // After run(): how the trace ended; the frame where it stopped (its stack and locals before the breaking
  // instruction, or the return value); the trace (graph, guards, inputs, side effects). The hook finishes the trace
  // through trace() (state guards, the graph's output, lifted inputs) before codegen reads it.
  const Output& output() const { return *this; }
  const Frame& frame() const { return *this; }
  Trace& trace() { return *this; }
  const Trace& trace() const { return *this; }

 private:
  friend const HandlerTable& handler_table();
  // Handler families (ops_*.cpp) register themselves into the table (called by handler_table()).
  static void register_load_store(HandlerTable& t);
  static void register_import(HandlerTable& t);
  static void register_arith(HandlerTable& t);
  static void register_call(HandlerTable& t);
  static void register_build(HandlerTable& t);
  static void register_control(HandlerTable& t);
  static void register_with(HandlerTable& t);
  static void register_iter(HandlerTable& t);
  static void register_dicts(HandlerTable& t);
  static void register_functions(HandlerTable& t);
  static void register_lists(HandlerTable& t);
  static void register_protocols(HandlerTable& t);
  // The free functions of a file (handlers, library rules, their helpers) are static members of a private nested
  // class defined in that file only (two or three where the file keeps them in separate groups).
  struct ArithOps; struct BuildOps; struct CallOps; struct ControlOps; struct FunctionOps; struct ImportOps;
  struct IterOps; struct IterSteps; struct LoadStoreOps; struct WithOps; struct DictOps; struct ListOps;
  struct RaiseOps; struct ExceptionOps; struct BuiltinRules; struct CallSupport; struct CallSteps;
  struct LibraryValues; struct ObjectAttrs; struct ModuleWalk; struct ModuleHooks; struct InlineSteps;
  struct IdentityUses; struct ConstantResults;

  // torch.nn modules made in the trace (made_modules.cpp): `cls(*args, **kwargs)` of a stateless torch.nn module
  // class on constants, built now (nullptr when it is not such a call); its attributes (constants of its __dict__, its
  // class's functions as bound methods); its call (forward inlined, global module hooks guarded empty).
  static ValuePtr make_nn_module(Tracer& t, const ValuePtr& cls, std::vector<ValuePtr>& args,
                                std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  static ValuePtr made_module_attr(Tracer& t, const ValuePtr& mod, const std::string& name);
  static ValuePtr call_made_module(Tracer& t, const ValuePtr& mod, std::vector<ValuePtr> args,
                                  std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // A module call (of the frame's module or one made in the trace) runs its forward directly only while torch.nn's
  // global module hooks are all empty: refuses (naming `what`) when one is registered, else guards each dict empty
  // through torch.nn.modules.module's globals (objects.cpp).
  static void guard_no_global_module_hooks(Tracer& t, const std::string& what);
  // Library constructs traced by what they do (library_values.cpp). The *_call functions are library rules (the builtin
  // rule contract, builtins.cpp's library_rules(): nullptr for argument shapes they do not model):
  // torch.Size(iterable) (a constant, or a Tuple of class torch.Size holding symbolic sizes); the legacy CPU tensor
  // classes torch.FloatTensor(...) ... torch.BoolTensor(...) (from data: torch.tensor of that dtype; from sizes:
  // torch.empty); torch.distributed.is_initialized() (folded, the default group's presence guarded).
  static ValuePtr torch_size_call(Tracer& t, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs);
  static ValuePtr legacy_tensor_call(Tracer& t, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs);
  static ValuePtr dist_initialized_call(Tracer& t, py::handle f, std::vector<ValuePtr>& args, Kwargs& kwargs);
  // max(a, b, ...) / min(...) / max(list) whose items are tensors: the item Python's comparisons pick, as
  // torch.where(item > acc, item, acc) nodes (one-element tensors of one shape and dtype); nullptr when no item is a
  // tensor.
  static ValuePtr min_max_of_tensors(Tracer& t, bool is_max, const std::vector<ValuePtr>& args);
  // Tensor.new_tensor(data, dtype=, device=, requires_grad=) of constant data: torch.tensor with self's dtype and
  // device.
  static ValuePtr new_tensor_call(Tracer& t, const ValuePtr& self, const std::vector<ValuePtr>& args,
                                 const Kwargs& kwargs);
  // a == b / a != b between objects whose classes compare by identity (object's own __eq__ / __ne__: nn.Modules): the
  // identity answer, both objects pinned; nullptr for any other operands.
  static ValuePtr identity_compare(Tracer& t, const std::string& op, const ValuePtr& a, const ValuePtr& b);
  // nn.ParameterList of the frame (torch.nn's own __getitem__ / __len__ / __iter__): p[i] (read as attribute str(i)),
  // len(p) and its items, its size guarded; nullptr / nullopt when `v` is not one.
  static ValuePtr parameter_list_item(Tracer& t, const ValuePtr& v, const ValuePtr& key);
  static ValuePtr parameter_list_len(Tracer& t, const ValuePtr& v);
  static std::optional<std::vector<ValuePtr>> parameter_list_items(Tracer& t, const ValuePtr& v);
  // random.random() / uniform / randint / randrange of constant arguments (random_calls.cpp): an unbacked number read
  // from a graph input drawn before the graph runs; nullptr for any other call.
  ValuePtr random_call(const ValuePtr& fn, const std::vector<ValuePtr>& args, const Kwargs& kwargs);
  // cls.__subclasses__() (class_queries.cpp): a list made in the trace, its answer guarded by calling it again; nullptr
  // for any other call.
  ValuePtr subclasses_call(const ValuePtr& fn, const std::vector<ValuePtr>& args, const Kwargs& kwargs);
  // The traced frame's real cell of free slot `slot` (ops_functions.cpp): an Object read by LOAD_CLOSURE in the
  // rewritten code (a ClosureCell source), the receiver of the frame's `nonlocal` stores (Frame::real_cells_, replayed
  // as `cell.cell_contents = v`) and what a read of the slot checks for a store an inlined closure made to that cell.
  ValuePtr top_frame_cell(int slot);
  // iter(seq) as GET_ITER makes it (ops_iter.cpp): an Iter over the items known now (a dict's keys watched for
  // changes); an Iter is its own iterator. iterator_next: the next item of Iter `it` (advancing it), nullptr when
  // exhausted.
  static ValuePtr make_iterator(Tracer& t, const ValuePtr& seq);
  static ValuePtr iterator_next(Tracer& t, const ValuePtr& it);
  // slice(start, stop[, step]) of constant bounds as a constant; not constant: unsupported (ops_build.cpp).
  static ValuePtr slice_of(Tracer& t, const ValuePtr& start, const ValuePtr& stop,
                           const ValuePtr& step = nullptr);
  // Pushes the Cell of cell/free slot `slot` (LOAD_CLOSURE; 3.13: LOAD_FAST of such a slot), made on first capture.
  static void push_closure_cell(Tracer& t, int slot);
  // Tensor attribute read (shape, dtype, device, T, ...): constant or graph node; throws Unsupported (torch_rules.cpp).
  static ValuePtr tensor_attr(Tracer& t, const ValuePtr& self, const std::string& name);

  int steps = 0;                     // jumps taken (bounds loops unrolled at trace time)
  // torch.compiler.is_compiling() calls in torch's own code this trace folded to True: code after them may rely on a
  // compile-only path (torch.optim's _stack_if_compiling stacks what its compiled caller made tensors), so no graph
  // break may follow one: the frame runs as Python instead, where the query is False throughout.
  int compiling_folds = 0;
  // The plain Python number a SymNum stands for now (the ShapeEnv records the guard that keeps it so); a Tuple
  // holding SymNums with them replaced; any other value unchanged.
  ValuePtr specialize(const ValuePtr& v);
  // An operator (operator.add, operator.lt, ...) on symbolic numbers and constants: a graph node and a SymNum,
  // or a constant when the result is a plain number.
  ValuePtr sym_operator(py::handle op, const std::vector<ValuePtr>& args);
  // x.item() under config.capture_scalar_outputs: a graph node whose value is an unbacked symbol of the trace's
  // ShapeEnv (a static trace starts again with fake tensors first).
  ValuePtr scalar_output(const ValuePtr& self);
  // int() / float() / max() / min() / abs() / math.sqrt() with a symbolic argument: torch's symbolic versions
  // (torch.sym_int, ...) as graph nodes; nullptr when `f` is none of them or no argument is symbolic.
  ValuePtr sym_builtin(py::handle f, const std::vector<ValuePtr>& args);
  // x.shape == y.shape (eq / ne of two tuples holding symbolic sizes): compared item by item on the examples (the
  // ShapeEnv guards each answer); nullptr when the operands are not such tuples.
  ValuePtr sym_tuple_compare(const std::string& name, const ValuePtr& a, const ValuePtr& b);
  // The value of a metadata query `name` (size, stride, numel, shape, ...) of tensor `self` whose answer on the
  // example is `result`: a constant when it holds no symbol; else SymNum values read by graph nodes.
  ValuePtr metadata_value(const ValuePtr& self, const std::string& name, const std::vector<ValuePtr>& args,
                          py::handle result);

  // --- helpers for handlers ---
  void push(ValuePtr v) { stack.push_back(std::move(v)); }
  ValuePtr pop();
  std::vector<ValuePtr> popn(size_t n);  // in stack order (deepest first)
  ValuePtr& peek(size_t depth = 1);      // 1 = top
  [[noreturn]] void unsupported(const std::string& reason);
  // unsupported() for an op that raised during fake-tensor propagation (see OpRaised): no specialised retry.
  [[noreturn]] void op_raised(const std::string& reason);

  // Argument resolution against the code object (borrowed).
  py::handle const_at(int i) const;
  py::handle name_at(int i) const;
  std::string local_name(int slot) const;

  // Reads local slot `slot` (wrapping the frame's value on first use).
  // True if local `slot` holds a value at this point of the trace (without reading it).
  bool local_bound(int slot) const;
  // True if instruction `index` of the current bytecode is covered by a try/except/finally handler (not a
  // with block's cleanup).
  bool in_user_try(size_t index) const;
  // Exception-table helpers: entry `e` covers instruction `index`; its handler starts with `ops` (opcode name,
  // oparg or -1 for any); its handler is a with statement's cleanup (PUSH_EXC_INFO; WITH_EXCEPT_START).
  bool covers(const bytecode::ExceptionEntry& e, size_t index) const;
  bool handler_is(const bytecode::ExceptionEntry& e, std::initializer_list<std::pair<const char*, int>> ops) const;
  bool with_cleanup(const bytecode::ExceptionEntry& e) const;
  // True for a PEP 709 inlined comprehension's handler (restores its saved locals and re-raises).
  bool comprehension_cleanup(const bytecode::ExceptionEntry& e) const;
  ValuePtr load_local(int slot);
  // Wraps a real Python value seen at `src` into a symbolic value and installs the guards it needs.
  ValuePtr wrap(py::handle value, SourcePtr src);
  // Dynamic shapes: asks `probe` (services().observe_tensor / observe_scalar: (code, cb_dynamic, value, name)) whether
  // an input of a static trace is dynamic now. It records the value in the frame state of the traced frame's code
  // (traced_code_, whose frame the source `name` is relative to; never an inlined callee's, whose state the next
  // compile of the traced frame would not consult).
  // automatic_only: dynamic only once the value changed between compiles, also under compile(dynamic=True).
  bool code_dynamic_probe(py::handle probe, py::handle value, const guards::Source& src, bool automatic_only);
  // Ends this attempt with a restart request (restart.h: throws RestartTrace); hook/translate.cpp decides.
  [[noreturn]] void request_restart(Restart r);
  // wrap() of an exact int or float input that may be dynamic: a placeholder whose example is what
  // TraceShapes.<make> gives (a SymInt, or an unbacked SymFloat) and a SymNum, with only its type guarded (the
  // value: the SHAPE_ENV guard); nullptr while it is static (the caller wraps the constant). automatic_only: see
  // code_dynamic_probe.
  ValuePtr wrap_dynamic_scalar(py::handle value, const SourcePtr& src, const char* make, bool automatic_only);
  // wrap() of an exact list, str-keyed dict or set of constants: a container value with a Source and the
  // real object, its items wrapped; nullptr when the object is not one of those.
  ValuePtr wrap_container(py::handle value, SourcePtr src);
  // wrap_container of a dict with keys other than strings: a dispatch table of constants, classes and
  // typing forms mapped to constants, classes or functions (guarded whole), or nullptr.
  ValuePtr wrap_frozen_dict(py::handle value, SourcePtr src);
  // wrap() of an exact collections.defaultdict with string keys, a local, global or closure variable (dicts.cpp): a
  // Dict value with a source, the real object and its factory (DictOf::real, DictOf::factory), or nullptr.
  ValuePtr wrap_default_dict(py::handle value, SourcePtr src);
  // Loads a global / builtin by name (wrapped and guarded).
  ValuePtr load_global(const std::string& name);
  // Attribute read on a symbolic value.
  ValuePtr load_attr(const ValuePtr& obj, const std::string& name);
  // The value an `obj.name = v` (STORE_ATTR or setattr) of this trace gave the object, not replayed yet;
  // null when there is none. Aliasing with objects stored through other values is guarded.
  ValuePtr pending_attr(const ValuePtr& obj, const std::string& name);
  // `self.name` bound to the Python function `func` found on self's class (guarded through
  // `self.__class__.name`); rebuilt as that attribute of self.
  ValuePtr method_of(const ValuePtr& self, py::handle func, const std::string& name);
  // inspect.signature(f) answered at trace time (calls.cpp), or nullptr when `fn` is not that call.
  ValuePtr signature_of(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                        const std::vector<std::pair<std::string, ValuePtr>>& kwargs);

  // Calls; args in call order, kwargs by name.
  ValuePtr call(const ValuePtr& fn, std::vector<ValuePtr> args, std::vector<std::pair<std::string, ValuePtr>> kwargs);
  ValuePtr call_torch(py::handle fn, std::vector<ValuePtr> args,
                      std::vector<std::pair<std::string, ValuePtr>> kwargs, bool factory);
  ValuePtr call_tensor_method(const ValuePtr& self, const std::string& name, std::vector<ValuePtr> args,
                              std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // Switches grad mode inside the graph (a torch._C._set_grad_enabled node) and for the rest of the trace.
  void set_grad_mode(bool enabled);
  // A call of a function marked assume_constant_result: made now, on the arguments' real values; its result is a
  // constant of the graph (assume_constant.cpp). constant_result wraps such a result.
  ValuePtr call_constant_result(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr constant_result(const std::string& attr, py::handle result, int depth);
  // `optimizer._init_group(group, [], [], ...)` of a torch.optim optimizer: made for real, its lists mapped back onto
  // guarded inputs (optimizer.cpp); nullptr when `fn` is not that call or it cannot be made that way.
  // torch._dynamo's decompositions of addcmul_ / addcdiv_ with value= and add_ with a tensor alpha= (optimizer.cpp),
  // or nullptr when the call is not one of those (or config.enable_dynamo_decompositions is off).
  ValuePtr optimizer_op_decomposition(const ValuePtr& self, const std::string& name, const std::vector<ValuePtr>& args,
                                      const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // d[t] on a dict read from the frame keyed by a tensor the frame holds (an optimizer's state), or nullptr.
  ValuePtr tensor_keyed_item(const ValuePtr& container, const ValuePtr& key);
  // `t in d` on such a dict (one whose `in` is dict's own): a constant, the key's identity and presence guarded;
  // nullptr otherwise.
  ValuePtr tensor_key_in(const ValuePtr& container, const ValuePtr& key);
  // The real tensor behind `key` (a graph input of the frame) when `container` is a dict read from the frame.
  py::object frame_tensor_key(const ValuePtr& container, const ValuePtr& key);
  // Guards that the key at position `at` of the frame's dict `container` is the frame's tensor `key` (optimizer.cpp).
  void guard_tensor_key(const ValuePtr& container, const ValuePtr& key, int at);
  ValuePtr optimizer_init_group(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // Traces a call of a user Python function (a PyFunction) inline; throws Unsupported when it cannot.
  ValuePtr inline_call(const ValuePtr& fn, std::vector<ValuePtr> args,
                       std::vector<std::pair<std::string, ValuePtr>> kwargs);
  int inline_depth() const { return inline_depth_; }
  // True if instruction `index` of the current frame is covered by any exception-table entry (a try or
  // with block): an exception raised there does not simply leave the frame.
  bool in_handler_range(size_t index) const;
  // The items of an object made in the trace (or read from the frame) iterated through its class's
  // Python __iter__ (protocols.cpp); nullptr when its class does not define one.
  std::optional<std::vector<ValuePtr>> iterate_user_object(const ValuePtr& v);
  // Calling a builtin exception class right before `raise` in an inlined function: throws TracedRaise.
  void raise_builtin_exception(py::handle cls, const std::vector<ValuePtr>& args);
  // A TracedRaise at bc.insts[pc] of an inlined function covered by an exception-table entry (protocols.cpp):
  // the stack is cut to the entry's depth, the exception pushed and pc moved to the handler, as CPython unwinds.
  // False when no entry covers pc (the exception leaves the function) or in the traced frame itself.
  bool enter_exception_handler(const TracedRaise& e);
  // collections.abc.Mapping.get / __contains__ called on a user mapping (protocols.cpp): self[key] traced, its
  // KeyError handled as the mixin does; nullptr when `f` is neither.
  ValuePtr mapping_mixin_call(py::handle f, const std::vector<ValuePtr>& args,
                              const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // copy.deepcopy(x) (deepcopy.cpp): constants as themselves; tuples, lists, dicts, sets and objects made in
  // the trace copied structurally; a plain-data object of the frame becomes a new object (an Instance) of its
  // class holding copies of its attributes, each read guarded. nullptr when `f` is not copy.deepcopy.
  using CopyMemo = std::unordered_map<const Value*, ValuePtr>;
  ValuePtr deepcopy_call(py::handle f, const std::vector<ValuePtr>& args,
                         const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr deep_copy(const ValuePtr& v, CopyMemo& memo);
  ValuePtr copy_frame_object(const ValuePtr& v, CopyMemo& memo);
  ValuePtr copy_constant_dict(const ValuePtr& v, CopyMemo& memo);
  // A function decorated with @torch.no_grad() / @torch.enable_grad() (torch.utils._contextlib's wrapper): the
  // wrapped function inlined in that grad mode (ops_with.cpp); nullptr for any other function.
  ValuePtr grad_decorated_call(const ValuePtr& fn, std::vector<ValuePtr>& args,
                               std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  bool trusted_globals() const { return trusted_globals_; }
  // True while the globals in use are the traced frame's own (not an inlined callee's from another module).
  bool in_frame_module() const { return fv.globals == frame_globals_; }
  // The items of a value iterated at trace time (tuple, list, constant range/tuple/str, an iterator,
  // nn.Sequential / nn.ModuleList with sources); throws Unsupported otherwise (ops_iter.cpp).
  std::vector<ValuePtr> unpack_iterable(const ValuePtr& v);
  // Throws Unsupported for a Dict whose key order is not guarded (a defaultdict of the frame).
  void refuse_unordered(const ValuePtr& d);
  // Tensors (tensors.cpp): the rows of a tensor iterated (tensor[i] nodes), Tensor.type(...) as a constant
  // name or a dtype conversion, len() of an nn.ModuleList / Sequential / ModuleDict (nullptr otherwise).
  std::vector<ValuePtr> unpack_tensor(const ValuePtr& v);
  ValuePtr tensor_type(const ValuePtr& self, const std::vector<ValuePtr>& args,
                       const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr module_container_len(const ValuePtr& v);
  // enumerate / zip / reversed / list / tuple over such values, or nullptr when not applicable.
  ValuePtr call_iter_builtin(const std::string& name, const std::vector<ValuePtr>& args);
  // Dicts made in the trace (dicts.cpp). The bool forms return false when `d` is not a Dict value.
  bool dict_subscr(const ValuePtr& d, const ValuePtr& key);  // pushes d[key]
  bool dict_store(ValuePtr& d, const ValuePtr& key, const ValuePtr& value);
  bool dict_delete(ValuePtr& d, const ValuePtr& key);
  ValuePtr dict_contains(const ValuePtr& d, const ValuePtr& key);
  // The value of a Dict's key: a constant, or the tensor a tensor key's example stands for (Trace::tensor_keys).
  ValuePtr key_value(const py::object& k);
  ValuePtr call_dict_method(ValuePtr d, const std::string& name, std::vector<ValuePtr> args,
                            std::vector<std::pair<std::string, ValuePtr>> kwargs);
  ValuePtr make_dict(const std::vector<ValuePtr>& args, const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // collections.defaultdict(factory, ...) made in the trace: a Dict value with DictOf::factory; reads of a missing key
  // (dict_subscr) call the factory and store its value, as defaultdict.__missing__ does.
  ValuePtr make_default_dict(const std::vector<ValuePtr>& args, const Kwargs& kwargs);
  // Call before changing container `c` (List / Dict / Set, or the content of a Cell) in place: saves its contents so that an
  // instruction failing halfway leaves no change behind, and records a container from the frame in
  // `mutated`.
  void will_mutate(const ValuePtr& c);
  // Records `c`'s contents for rollback of the running instruction, once per instruction.
  void save_undo(const ValuePtr& c);
  // Installs the pending identity guards of `v` and of everything it holds (items, a method's receiver).
  void realize(const ValuePtr& v);
  // True if writing into `c` could change attributes of an object of the frame (see items_written).
  bool may_hold_attributes(const ValuePtr& c) const;
  // Lists, tuples and sets (lists.cpp): their methods, set(), and the set / dict operators.
  ValuePtr call_list_method(ValuePtr l, const std::string& name, std::vector<ValuePtr> args,
                            std::vector<std::pair<std::string, ValuePtr>> kwargs);
  ValuePtr call_set_method(ValuePtr s, const std::string& name, std::vector<ValuePtr> args,
                           std::vector<std::pair<std::string, ValuePtr>> kwargs);
  ValuePtr make_set(const std::vector<ValuePtr>& args, bool frozen);
  // Builtins that iterate values or call functions at trace time, attribute builtins, isinstance/type of
  // known values, super() and functools.partial (builtins.cpp); nullptr when not handled there.
  ValuePtr call_builtin(const std::string& name, py::handle f, std::vector<ValuePtr>& args,
                        std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // super().__getattribute__(name): object's generic lookup on `self`, past its class's override.
  // dict.get / __getitem__ / __contains__ through super() on a dict subclass from the frame: dict's own
  // lookup, guarded on the key's presence (and the value read).
  ValuePtr super_dict_call(const ValuePtr& self, const std::string& op, const std::vector<ValuePtr>& args,
                           const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr generic_getattr(const ValuePtr& self, const std::vector<ValuePtr>& args,
                           const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr super_attr(const ValuePtr& sup, const std::string& name);
  ValuePtr call_partial(const ValuePtr& p, std::vector<ValuePtr> args,
                        std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // namedtuple instances: Tuple values whose class (TupleOf::cls, tuple_class()) is the namedtuple class.
  ValuePtr make_namedtuple(py::handle cls, const std::vector<ValuePtr>& args,
                           const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  ValuePtr namedtuple_attr(const ValuePtr& nt, const std::string& name);
  // mods[i] / mods["name"] on an nn.ModuleList, nn.Sequential or nn.ModuleDict of the frame: the child,
  // read through the container's _modules dict; nullptr when `obj` is not one of those.
  ValuePtr module_item(const ValuePtr& obj, const ValuePtr& key);
  // module(*args, **kwargs) of an nn.Module of the frame: hooks and forward inlined (objects.cpp).
  ValuePtr call_module(const ValuePtr& mod, std::vector<ValuePtr> args,
                       std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // module.children() / modules() / parameters() / buffers() and their named_ forms, when `func` is
  // torch.nn.Module's own method: an iterator over the values, the module tree guarded; nullptr otherwise.
  ValuePtr module_iteration(const ValuePtr& self, py::handle func, const std::string& name,
                            const std::vector<ValuePtr>& args,
                            const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // Objects of plain Python classes made in the trace (objects.cpp): cls(*args) with __init__ inlined,
  // attribute reads (instance dict, then class: methods, properties, class attributes guarded on the class).
  ValuePtr make_instance(const ValuePtr& cls, std::vector<ValuePtr> args,
                         std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // inst.name: through its class's Python __getattribute__ when it has one (inlined), else the generic lookup.
  ValuePtr instance_attr(const ValuePtr& inst, const std::string& name);
  // object.__getattribute__(inst, name): instance attributes, then the class; `__class__`, and `__dict__` as a
  // frozen snapshot. A missing attribute raises a traced AttributeError.
  ValuePtr instance_generic_attr(const ValuePtr& inst, const std::string& name);
  // The getter of a property found on a class (descr: borrowed): the property pinned by ID_MATCH through `psrc`,
  // its fget returned with the source `psrc.fget` (pinned too), so the cells of a closure getter
  // (torch.nn.utils.parametrize's) are read through guarded sources when it is inlined. A property subclass
  // with its own __get__ and a getter that is not a Python function are unsupported.
  ValuePtr property_getter(PyObject* descr, const SourcePtr& psrc, const std::string& name);
  // object.__setattr__ / object.__delattr__ on an Instance (no class override involved).
  void instance_setattr(const ValuePtr& obj, const std::string& name, const ValuePtr& value);
  void instance_delattr(const ValuePtr& obj, const std::string& name);
  void sync_dict_view(const ValuePtr& obj);  // after changing an Instance: its __dict__ view follows
  // The class's Python __getattribute__ of Instance `inst` (borrowed), or nullptr when it has none.
  PyObject* getattribute_override(const ValuePtr& inst) const;
  std::string describe_class(const ValuePtr& cls) const;
  // transformers ModelOutput objects made in the trace (records.cpp): construction from the dataclass
  // fields, reads by attribute (fields, properties), key, index and slice, and their dict/tuple methods.
  ValuePtr make_record(const ValuePtr& cls, std::vector<ValuePtr> args,
                       std::vector<std::pair<std::string, ValuePtr>> kwargs);
  ValuePtr record_attr(const ValuePtr& rec, const std::string& name);
  ValuePtr record_item(const ValuePtr& rec, const ValuePtr& key);
  ValuePtr call_record_method(const ValuePtr& rec, const std::string& name, std::vector<ValuePtr> args,
                              std::vector<std::pair<std::string, ValuePtr>> kwargs);
  bool record_none(const ValuePtr& v) const;
  std::vector<size_t> record_present(const ValuePtr& rec) const;  // indices of the fields not None
  // os.environ (environ.cpp): `get`, `[]` and `in` with a constant str key are constants of the trace,
  // guarded on the variable's presence and value.
  bool is_environ(const ValuePtr& v) const;
  ValuePtr environ_call(const ValuePtr& env, const std::string& name, const std::vector<ValuePtr>& args,
                        const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // obj.name = value on an object of the frame: recorded and replayed after the graph, in program order.
  void store_attr(const ValuePtr& obj, const std::string& name, const ValuePtr& value);
  // `a <op> b` for set operators (| & - ^ and their in-place forms) on sets and `|` on dicts; nullptr
  // when neither operand is a Set/Dict value.
  ValuePtr container_operator(const std::string& op, const ValuePtr& a, const ValuePtr& b);
  // Attribute of a user object or nn.Module (objects.cpp); calls of bound methods and modules.
  // `past_override`: object.__getattribute__'s lookup, past a Python __getattribute__ of obj's class (which is
  // otherwise inlined first).
  ValuePtr object_attr(const ValuePtr& obj, const std::string& name, bool past_override = false);
  // The Python __getattribute__ of the class of `o`, an object of the frame (borrowed), or nullptr: none, or `o`
  // is a class or a module.
  PyObject* frame_getattribute_override(py::handle o) const;
  // The source of type(obj) for an object of the frame: obj.__class__, read through object's lookup where its class
  // has a Python __getattribute__ (which could report another class, and would run on every guard check).
  SourcePtr type_source(const ValuePtr& obj) const;
  // The subscript at pc only feeds a loop (GET_ITER next, or enumerate(...) then GET_ITER).
  bool slice_only_iterated();
  // `obj.<dunder>(*args)` for an object of the frame whose class defines `dunder` in Python (a user
  // Mapping's __contains__ / __getitem__): the method inlined, guarded through type(obj). nullptr when
  // `obj` is not such an object.
  ValuePtr call_user_dunder(const ValuePtr& obj, const char* dunder, std::vector<ValuePtr> args);
  // Fn.apply(*args) of a custom torch.autograd.Function (autograd_fn.cpp): its forward and backward traced
  // speculatively with a modelled ctx, then one node calling Fn.apply; nullptr when `fn` is not such a call.
  ValuePtr autograd_function_apply(const ValuePtr& fn, const std::vector<ValuePtr>& args,
                                   const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // Reads and method calls on the ctx of that speculation (autograd_.ctx).
  ValuePtr autograd_ctx_attr(const std::string& name);
  ValuePtr autograd_ctx_call(const std::string& name, const std::vector<ValuePtr>& args,
                             const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // State of an autograd.Function speculation: the ctx value, what save_for_backward /
  // mark_non_differentiable were given, and whether the backward is being traced.
  struct AutogradSpeculation {
    ValuePtr ctx;
    std::vector<ValuePtr> saved;
    std::vector<graph::Node*> non_differentiable;
    bool in_backward = false;
  };
  AutogradSpeculation autograd_;
  // Number of will_mutate() calls (containers, instances, cells changed in place) over the whole trace.
  size_t mutation_count_ = 0;
  // What a speculative step (an inline that may fail, an attribute read that may raise) can change, taken before it:
  // graph nodes, attribute stores, changes to containers / instances / cells, frame containers recorded as mutated.
  struct TraceMark {
    size_t nodes = 0;      // graph.mark()
    size_t stores = 0;     // attr_stores.size()
    size_t mutations = 0;  // mutation_count_
    size_t mutated = 0;    // mutated.size()
  };
  TraceMark mark_state() const;
  // No Python state changed since `m` (no attribute store, no container / instance / cell change); graph nodes may
  // have been added.
  bool state_unchanged_since(const TraceMark& m) const;
  // Nothing changed since `m`: Python state as above, and no graph node added.
  bool unchanged_since(const TraceMark& m) const;
  ValuePtr call_object(const ValuePtr& fn, std::vector<ValuePtr> args,
                       std::vector<std::pair<std::string, ValuePtr>> kwargs);
  // Calls pure `f` on constant-like values at trace time and wraps the constant result; `what` names it
  // in messages. Throws Unsupported for mutable arguments or non-constant results.
  ValuePtr fold_call(py::handle f, const std::string& what, const std::vector<ValuePtr>& args,
                     const std::vector<std::pair<std::string, ValuePtr>>& kwargs);
  // A binary/unary Python operator (an `operator` module function) applied to values.
  ValuePtr apply_operator(py::handle op, std::vector<ValuePtr> args);
  // container[key] = value on a tensor container (an operator.setitem node kept for its effect).
  void setitem(const ValuePtr& container, const ValuePtr& key, const ValuePtr& value);

  // Graph argument / meta example of a value (tensors by node / example value).
  graph::Arg to_arg(const ValuePtr& v);
  py::object to_example(const ValuePtr& v);
  // Wraps the example result of a graph node into a value (tensor, tuple of tensors).
  ValuePtr wrap_result(graph::Node* node, py::handle result, py::object device);

 private:
  void step(const bytecode::Instruction& inst);
  // True if a graph break can be placed before instruction `index` (restartable there as Python).
  bool breakable(size_t index, std::string* why) const;
  // True if instruction `index` is inside a loop (a later backward jump lands at or before it).
  bool loop_depth(size_t index) const;
  // Per instruction: 1 for a backward jump that closes a loop (its target dominates it), computed once.
  const std::vector<char>& loop_back_edges() const;
  mutable std::vector<char> loop_edges_;
  mutable bool loop_edges_ready_ = false;
  mutable const void* loop_edges_key_ = nullptr;
  // Runs handlers until RETURN_VALUE in the current (inlined) frame state; Unsupported propagates.
  void run_nested();
  // Runs the handler of bc.insts[pc] and advances pc unless the handler jumped.
  void execute_one();
  int inline_depth_ = 0;
  int wrap_depth_ = 0;   // nesting of wrap() calls (containers inside containers)
  size_t wrapped_ = 0;   // values wrap() made in this trace
  PyObject* frame_globals_ = nullptr;  // the traced frame's own globals (borrowed from the frame)
  // The traced frame's code (borrowed, as `code` at construction): Frame::code is the running (maybe inlined) one.
  PyCodeObject* traced_code_ = nullptr;
  // Meta or fake examples (from TraceOptions::shapes, set as run() starts): every choice between the two goes through it.
  ExampleValues examples_;
  struct Undo {  // a container's contents (or a cell's) before the running instruction first changed it
    ValuePtr value;
    std::vector<ValuePtr> items;
    std::vector<py::object> keys;
    Payload payload;  // a cell's content (CellOf; only a cell's payload is restored)
  };
  std::vector<Undo> undo_;  // inlined torch library frame: its globals are program constants
  // Torch contexts (torch_contexts.cpp): the CtxExitOf values of the `with` blocks on them entered and not left,
  // outermost first; each one's real context is entered while tracing (shape propagation sees its state).
  std::vector<ValuePtr> open_ctx_;
  // Per inlined call, innermost last: whether the instruction after the calling one is BEFORE_WITH (a factory of
  // the context a `with` enters, `lambda: torch.set_grad_enabled(False)`).
  std::vector<char> call_enters_with_;
  // torch.autocast(...) / inference_mode(...) / sdpa_kernel(...) (or a functools.partial of one) called on constants:
  // the context value, or nullptr when `f` is none of them.
  ValuePtr torch_context_call(py::handle f, const std::vector<ValuePtr>& args, const Kwargs& kwargs);
  // BEFORE_WITH on a TorchCtxOf value: its enter recorded in the graph and made for real; returns the __exit__.
  ValuePtr enter_torch_context(const ValuePtr& ctx);
  // The traced __exit__(None, None, None) of a block entered by enter_torch_context.
  void exit_torch_context(const ValuePtr& exit);
  // Leaves the real contexts of open_ctx_ past the first `keep`, innermost first, recording their exits in the
  // graph when `record` (a graph ending at a break inside them is balanced).
  void close_torch_contexts(size_t keep, bool record);
  // The Cell of `slot`, or nullptr when the slot was never captured.
  ValuePtr cell_of(int slot) const {
    return static_cast<size_t>(slot) < cell_boxes.size() ? cell_boxes[static_cast<size_t>(slot)] : nullptr;
  }
  // (stored-through value, read-through value) pairs whose aliasing is already guarded (load_attr).
  std::set<std::pair<const Value*, const Value*>> alias_checked_;
  // The running frame (this Tracer's Frame base), for swapping a callee's in and out whole.
  Frame& running_frame() { return *this; }
};

// Process-wide Python objects the interpreter needs (imported once, never freed).
struct PyRefs {
  py::object torch, operator_mod, builtins, math, getattr_fn, torch_device, meta_device, tensor_type;
  // torch.nn classes and torch.nn.modules.module (its global hook dicts), functools.partial.
  py::object nn_module, nn_parameter, nn_sequential, nn_module_list, nn_module_dict, nn_module_module,
      functools_partial;
  // Standard-library objects the trace recognises: copy.deepcopy, os.environ, abc.ABCMeta, copyreg.dispatch_table.
  py::object copy_deepcopy, os_environ, abc_meta, copyreg_dispatch;
  static PyRefs& get();
  // Whether `o` (borrowed) is a torch.nn.Module instance, by its type: no Python code runs.
  bool is_module_instance(PyObject* o) const;
};

}  // namespace cdynamo::interp
