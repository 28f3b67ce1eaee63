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
#include <type_traits>

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

namespace detail {
// The address of the whole object, whichever base `p` points to (the ledger indexes modules by
// it), so that a hook announced from a secondary base class is still found.
template <class T>
const void* object_address(const T* p) {
  if constexpr (std::is_polymorphic_v<T>) {
    return dynamic_cast<const void*>(p);
  } else {
    return static_cast<const void*>(p);
  }
}
}  // namespace detail

}  // namespace graphcheck

#define GRAPHCHECK_HOOK(module, hook) \
  ::graphcheck::hook_called(::graphcheck::detail::object_address(module), hook)
