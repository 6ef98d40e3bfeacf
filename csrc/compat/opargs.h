// opargs.h — owns how each CPython version encodes the opargs cdynamo reads and writes (LOAD_GLOBAL's null
// bit, LOAD_ATTR's method bit, COMPARE_OP, LOAD_SUPER_ATTR) and which call sequence it emits; the only place
// outside compat_3XX.cpp that knows these encodings.
#pragma once

#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "cdynamo compat: opargs.h knows CPython 3.11 to 3.13; add the encodings of this version"
#endif

namespace cdynamo::compat::opargs {

inline constexpr int kMinor = PY_MINOR_VERSION;

// LOAD_GLOBAL: name index and whether a NULL is pushed before the value (3.11+: namei << 1 | null).
inline int load_global_name(int arg) { return arg >> 1; }
inline bool load_global_null(int arg) { return (arg & 1) != 0; }
inline int load_global_arg(int name, bool push_null) { return (name << 1) | (push_null ? 1 : 0); }

// LOAD_ATTR: name index and whether it is the method form (3.12: namei << 1 | method; 3.11 has a separate
// LOAD_METHOD opcode taking the name index, and LOAD_ATTR's arg is the name index).
inline int load_attr_name(int arg) { return kMinor >= 12 ? arg >> 1 : arg; }
inline bool load_attr_method(int arg) { return kMinor >= 12 && (arg & 1) != 0; }
inline int load_attr_arg(int name, bool method) { return kMinor >= 12 ? (name << 1) | (method ? 1 : 0) : name; }
// Whether the method form is LOAD_METHOD (3.11) rather than LOAD_ATTR with the method bit.
inline constexpr bool kHasLoadMethod = kMinor == 11;

// LOAD_SUPER_ATTR (3.12+): name index, method form, two-argument super(cls, self) call.
inline int load_super_attr_name(int arg) { return arg >> 2; }
inline bool load_super_attr_method(int arg) { return (arg & 1) != 0; }
inline bool load_super_attr_two_args(int arg) { return (arg & 2) != 0; }

// COMPARE_OP: index into opcode.cmp_op (3.12: the low four bits are a specialization mask; 3.13: the low
// five, bit 4 asking for the result converted to bool, as `if a < b:` compiles).
inline int compare_op(int arg) { return kMinor >= 13 ? arg >> 5 : kMinor >= 12 ? arg >> 4 : arg; }
inline bool compare_op_to_bool(int arg) { return kMinor >= 13 && (arg & 16) != 0; }

// Calls: 3.11 runs PRECALL n before CALL n; 3.12 has CALL alone. Both take [NULL|callable, callable|self,
// args...] and KW_NAMES (a const index) just before. 3.13 takes [callable, self|NULL, args...], and calls
// with keywords are CALL_KW n with the names tuple pushed last (no KW_NAMES).
inline constexpr bool kHasPrecall = kMinor == 11;
inline constexpr bool kHasCallKw = kMinor >= 13;
// Where a plain callable's NULL goes: below the callable through 3.12 ([NULL, callable, args]); 3.13 puts
// it above ([callable, NULL, args]).
inline constexpr bool kNullBeforeCallable = kMinor < 13;
// co_stacksize: 3.13's compiler counts RETURN_CONST's constant as a slot (it sizes the stack before folding
// LOAD_CONST; RETURN_VALUE into RETURN_CONST); 3.12's does not.
inline constexpr bool kReturnConstNeedsSlot = kMinor >= 13;
// LOAD_CLOSURE is an opcode through 3.12; 3.13 compiles it to LOAD_FAST of the cell or free slot (which holds
// the cell itself).
inline constexpr bool kHasLoadClosure = kMinor < 13;
// POP_JUMP_IF_TRUE/FALSE and UNARY_NOT take an exact bool on 3.13 (TO_BOOL before them); any value before.
inline constexpr bool kJumpNeedsBool = kMinor >= 13;
// MAKE_FUNCTION takes its closure/defaults flags in the oparg through 3.12 (3.13: SET_FUNCTION_ATTRIBUTE).
inline constexpr bool kMakeFunctionFlags = kMinor < 13;

// CALL_INTRINSIC_1 operands (3.12+) cdynamo traces.
inline constexpr int kIntrinsicUnaryPositive = 5;
inline constexpr int kIntrinsicListToTuple = 6;

// FOR_ITER on an exhausted iterator: pops the iterator and continues this many instructions after its
// target (3.11: at the target itself; 3.12: after the END_FOR there; 3.13: after END_FOR and POP_TOP).
inline constexpr int kForIterSkip = kMinor >= 13 ? 2 : kMinor >= 12 ? 1 : 0;

// LOAD_FAST_LOAD_FAST / STORE_FAST_STORE_FAST / STORE_FAST_LOAD_FAST (3.13): two local slots in one oparg;
// the first (high nibble) is loaded or stored first.
inline int first_fast(int arg) { return arg >> 4; }
inline int second_fast(int arg) { return arg & 15; }
inline int fast_pair_arg(int first, int second) { return (first << 4) | second; }

// CONVERT_VALUE (3.13) / FORMAT_VALUE's low bits (3.11, 3.12): 1 str, 2 repr, 3 ascii.
inline constexpr int kConvertStr = 1;
inline constexpr int kConvertRepr = 2;
inline constexpr int kConvertAscii = 3;

}  // namespace cdynamo::compat::opargs
