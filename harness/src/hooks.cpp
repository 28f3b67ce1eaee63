#include "graphcheck/hooks.h"

namespace graphcheck {
namespace {
thread_local HookSink* t_sink = nullptr;
}

HookSinkScope::HookSinkScope(HookSink& sink) : m_previous(t_sink) { t_sink = &sink; }
HookSinkScope::~HookSinkScope() { t_sink = m_previous; }

void hook_called(const void* module, std::string_view hook) {
  if (t_sink) t_sink->on_hook(module, hook);
}

}  // namespace graphcheck
