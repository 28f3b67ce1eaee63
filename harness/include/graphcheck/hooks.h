#pragma once
// Hook announcements. A lifecycle hook inside a model says that it ran with one line:
//
//   void DecoderLayer::finalize_mhc_broadcast_weights() {
//     GRAPHCHECK_HOOK(this, "finalize_mhc_broadcast_weights");
//     ...
//
// `this` identifies the module (the hook ledger resolves it to a module path such as
// "layers.1"); the driver forwards each call, with the phase it happened in, to every probe.
// Outside a graphcheck run the call does nothing. Torch-free.

#include <string_view>

namespace graphcheck {

// Receives hook announcements made on this thread while it is installed.
class HookSink {
 public:
  virtual ~HookSink() = default;
  virtual void on_hook(const void* module, std::string_view hook) = 0;
};

// Installs a sink for its lifetime on this thread (nests; the previous sink is restored).
class HookSinkScope {
 public:
  explicit HookSinkScope(HookSink& sink);
  ~HookSinkScope();
  HookSinkScope(const HookSinkScope&) = delete;
  HookSinkScope& operator=(const HookSinkScope&) = delete;

 private:
  HookSink* m_previous;
};

void hook_called(const void* module, std::string_view hook);

}  // namespace graphcheck

#define GRAPHCHECK_HOOK(module, hook) \
  ::graphcheck::hook_called(static_cast<const void*>(module), hook)
