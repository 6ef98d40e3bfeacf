// resume_info.cpp — owns the co_extra slot where continuation records and decoded user code are kept.
#include "codegen/resume_info.h"

#include <memory>
#include <stdexcept>

#include "codegen/liveness.h"
#include "compat/compat.h"

namespace cdynamo::codegen {

namespace {

// One co_extra value per code object: either (or both) records.
struct Extra {
  std::unique_ptr<OriginInfo> origin;
  std::unique_ptr<ResumeInfo> resume;
};

void free_extra(void* p) {
  // Called by CPython when the code object dies (with the GIL held); may drop a reference to a code object.
  delete static_cast<Extra*>(p);
}

int extra_index() {
  static int index = compat::code_extra_index(free_extra);
  if (index < 0) throw std::runtime_error("cannot reserve a code object extra slot");
  return index;
}

Extra* get(PyCodeObject* code) { return static_cast<Extra*>(compat::code_get_extra(code, extra_index())); }

Extra* ensure(PyCodeObject* code) {
  if (Extra* e = get(code)) return e;
  auto* e = new Extra();
  if (!compat::code_set_extra(code, extra_index(), e)) {
    delete e;
    throw std::runtime_error("cannot attach continuation data to a code object");
  }
  return e;
}

}  // namespace

const OriginInfo& origin_info(PyCodeObject* code) {
  Extra* e = ensure(code);
  if (!e->origin) {
    auto info = std::make_unique<OriginInfo>();
    info->bc = bytecode::decode(code);
    info->succ = successors(info->bc);
    info->live = live_locals(info->bc, code->co_nlocals, info->succ);
    info->windows = plan_windows(code, info->bc, info->succ, info->live);
    e->origin = std::move(info);
  }
  return *e->origin;
}

const ResumeInfo* resume_info(PyCodeObject* code) {
  Extra* e = get(code);
  return e ? e->resume.get() : nullptr;
}

void set_resume_info(PyCodeObject* code, ResumeInfo* info) {
  std::unique_ptr<ResumeInfo> owned(info);
  ensure(code)->resume = std::move(owned);
}

}  // namespace cdynamo::codegen
