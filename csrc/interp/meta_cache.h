// meta_cache.h — owns the shape-propagation memo: results of torch ops on meta tensors keyed by the op,
// the metadata of its tensor arguments and its constant arguments (no LibTorch headers here).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "interp/value.h"

namespace cdynamo::interp {

// Builds the key of one call; `ok` turns false as soon as an argument cannot be keyed exactly (then the
// call is propagated without the memo).
struct MetaKey {
  std::string bytes;
  bool ok = true;
  // `op_tag` names the callable: "F" + address of a torch function (process-lifetime objects only) or
  // "M" + tensor method name. Grad mode and the default dtype are part of every key.
  explicit MetaKey(const std::string& op_tag);
  void add(const ValuePtr& v);
  // A Python number keyed by its type only (bool / int / float / complex), else as add(): for elementwise
  // operators, whose result metadata does not depend on a scalar operand's value.
  void add_scalar_kind(const ValuePtr& v);
  void add_kw(const std::string& name, const ValuePtr& v);
};

// A fresh meta tensor (new reference) with the metadata cached under `key`, or an empty object.
py::object meta_cache_lookup(const MetaKey& key);
// Remembers the metadata of `result` under `key` when `result` is a plain tensor whose metadata a fresh
// tensor can reproduce exactly (dense, not a view, storage offset 0); otherwise does nothing.
void meta_cache_store(const MetaKey& key, py::handle result);
// Number of cached results and hits so far (tests, benchmarks).
std::pair<size_t, size_t> meta_cache_stats();
// Forgets every cached result.
void meta_cache_clear();

}  // namespace cdynamo::interp
